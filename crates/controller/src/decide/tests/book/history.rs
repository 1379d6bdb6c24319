//! What the booking keeps across Jobs: an apply that vanished, a manual plan's outcome, and a
//! Job booked twice.

use super::*;

#[test]
fn an_apply_that_vanished_is_recorded_until_one_after_it_succeeds() {
    use Operation::*;
    let after = |succeeded| {
        let f = finished(Apply, succeeded, false);
        annotated(
            f,
            annotations::AFTER_INTERRUPTED_APPLY,
            "captf-c-demo-apply-a0-000000",
        )
    };
    let lost = "captf-c-demo-apply-a2-000000";
    type Row<'a> = (&'a str, Vec<Finished>, Option<&'a str>, Vec<&'a str>);
    let rows: Vec<Row> = vec![
        ("nothing finished, nothing lost", vec![], None, vec![]),
        (
            "an apply that was no retry",
            vec![finished(Apply, true, false)],
            None,
            vec![],
        ),
        (
            "the retry succeeded: the record goes",
            vec![after(true)],
            None,
            vec!["clear"],
        ),
        (
            "the retry failed: it stays",
            vec![after(false)],
            None,
            vec![],
        ),
        (
            "a drift check is no retry",
            vec![annotated(
                finished(Drift, true, false),
                annotations::AFTER_INTERRUPTED_APPLY,
                "x",
            )],
            None,
            vec![],
        ),
        (
            "the Job the status names is gone",
            vec![],
            Some(lost),
            vec![
                "ApplyJobSucceeded=False ApplyFailed",
                "record captf-c-demo-apply-a2-000000",
                "release captf-c-demo-apply-a2-000000",
                "warn JobFailed",
            ],
        ),
        (
            "a retry succeeded and another apply is gone since",
            vec![after(true)],
            Some(lost),
            vec![
                "ApplyJobSucceeded=False ApplyFailed",
                "clear",
                "record captf-c-demo-apply-a2-000000",
                "release captf-c-demo-apply-a2-000000",
                "warn JobFailed",
            ],
        ),
    ];
    for (what, finished, vanished, want) in rows {
        let got = lines(&book::interruptions(&finished, vanished));
        assert_eq!(got, want, "{what}");
    }
}

#[test]
fn a_manual_plan_is_shown_applied_superseded_or_failed() -> anyhow::Result<()> {
    use Operation::*;
    use book::Shown;
    let key = ObjectKey::new("ns", WorkloadKind::Cluster, "demo")?;
    let with_plan = |f: Finished, hash: &str| {
        let mut f = annotated(with_result(f), annotations::INPUTS_HASH, "h2:in");
        if let Some(doc) = f.result.as_mut() {
            doc.plan = Some(PlanSummary {
                hash: hash.into(),
                create: 1,
                ..PlanSummary::empty()
            });
        }
        f
    };
    let approved = |f: Finished| annotated(f, annotations::APPROVED_PLAN, "p2:a");
    let changed = |f: Finished| marked(f, annotations::PLAN_CHANGED, "true");
    let empty = captf_runner::plan::EMPTY_PLAN_HASH;
    let consume = format!(
        "consume {}=p2:a then PlanApplied",
        annotations::APPROVE_PLAN
    );
    /// What, the Job, the plan shown, the approval, what is shown after, what is booked.
    type Row<'a> = (
        &'a str,
        Finished,
        Option<&'a str>,
        Option<&'a str>,
        &'a str,
        Vec<&'a str>,
    );
    let rows: Vec<Row> = vec![
        (
            "an apply of no plan",
            finished(Apply, true, false),
            None,
            None,
            "keep",
            vec![],
        ),
        (
            "the approved plan applied: the approval is used up",
            approved(finished(Apply, true, false)),
            Some("p2:a"),
            Some("p2:a"),
            "clear",
            vec!["approvals applied", &consume],
        ),
        (
            "an approval of a newer plan stays",
            approved(finished(Apply, true, false)),
            Some("p2:a"),
            Some("p2:b"),
            "clear",
            vec!["approvals applied"],
        ),
        (
            "a plan to approve",
            with_plan(finished(Plan, true, false), "p2:new"),
            None,
            None,
            "show p2:new",
            vec![
                "ApplyJobSucceeded=Unknown PlanAwaitingApproval",
                "approvals created",
                "event PlanReady",
            ],
        ),
        (
            "a plan that replaces the one shown",
            with_plan(finished(Plan, true, false), "p2:new"),
            Some("p2:old"),
            None,
            "show p2:new",
            vec![
                "ApplyJobSucceeded=Unknown PlanAwaitingApproval",
                "approvals superseded",
                "event PlanSuperseded",
                "approvals created",
                "event PlanReady",
            ],
        ),
        (
            "a plan that replaces an approved one: the approval is void, a warning says so",
            with_plan(finished(Plan, true, false), "p2:new"),
            Some("p2:old"),
            Some("p2:old"),
            "show p2:new",
            vec![
                "ApplyJobSucceeded=Unknown PlanAwaitingApproval",
                "approvals superseded",
                "warn PlanSuperseded",
                "approvals created",
                "event PlanReady",
            ],
        ),
        (
            "the same plan again supersedes nothing",
            with_plan(finished(Plan, true, false), "p2:new"),
            Some("p2:new"),
            None,
            "show p2:new",
            vec![
                "ApplyJobSucceeded=Unknown PlanAwaitingApproval",
                "approvals created",
                "event PlanReady",
            ],
        ),
        (
            "an empty plan needs no approval",
            with_plan(finished(Plan, true, false), empty),
            None,
            None,
            "show empty",
            vec![],
        ),
        (
            "a plan Job that left no plan",
            finished(Plan, true, false),
            Some("p2:old"),
            None,
            "keep",
            vec!["ApplyJobSucceeded=False ApplyFailed"],
        ),
        (
            "the approved plan changed: the new one is shown",
            changed(with_plan(approved(finished(Apply, false, false)), "p2:new")),
            Some("p2:a"),
            Some("p2:a"),
            "show p2:new",
            vec![
                "ApplyJobSucceeded=Unknown PlanChanged",
                "approvals superseded",
                "warn PlanChanged",
            ],
        ),
        (
            "the approved plan changed and no new one was read",
            changed(approved(finished(Apply, false, false))),
            Some("p2:a"),
            Some("p2:a"),
            "clear",
            vec![
                "ApplyJobSucceeded=Unknown PlanChanged",
                "approvals superseded",
                "warn PlanChanged",
            ],
        ),
        (
            "the approved apply failed",
            approved(finished(Apply, false, false)),
            Some("p2:a"),
            Some("p2:a"),
            "keep",
            vec!["approvals failed"],
        ),
        (
            "a destroy is no plan's",
            finished(Destroy, true, false),
            Some("p2:a"),
            Some("p2:a"),
            "keep",
            vec![],
        ),
    ];
    for (what, f, shown, approve_plan, want_shown, want) in rows {
        let before = book::PlanBefore {
            key: &key,
            shown,
            approve_plan,
        };
        let (got_shown, booked) = book::plan(&f, &before, t(NOW));
        let got_shown = match got_shown {
            Shown::Keep => "keep".to_owned(),
            Shown::Clear => "clear".to_owned(),
            Shown::Plan(p) if p.plan_hash == empty => "show empty".to_owned(),
            Shown::Plan(p) => format!("show {}", p.plan_hash),
        };
        assert_eq!(got_shown, want_shown, "{what}");
        assert_eq!(lines(&booked), want, "{what}");
    }
    Ok(())
}

#[test]
fn a_job_booked_again_after_its_status_patch_is_not_counted_again() -> anyhow::Result<()> {
    let restore = row("a restore booked again", {
        let f = finished(Operation::Restore, true, false);
        let f = annotated(f, annotations::STATE_LINEAGE, "L1");
        annotated(f, annotations::RESTORE_SERIAL, "5")
    });
    let mut again = booked(&restore)?;
    let first = lines(&again);
    again.uncounted();
    let want: Vec<String> = first
        .into_iter()
        .filter(|l| l != "restores succeeded")
        .collect();
    assert_eq!(lines(&again), want);
    Ok(())
}
