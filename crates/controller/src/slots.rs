//! The active-Job caps (pure): whether one more Job may start, given how many run.
//!
//! Foreground operations (apply, plan, destroy, restore) may fill a cap; background ones (drift,
//! refresh) start only below 80 % of it, so checks never crowd out changes users asked for.

use captf_api::Operation;

/// Running Jobs, from the Job cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Running {
    /// All managed Jobs.
    pub global: usize,
    /// Jobs of one CAPI Cluster: the cluster's own and its machines' and pools'.
    pub cluster: usize,
}

/// The caps; `None` is no cap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caps {
    pub global: Option<u32>,
    pub cluster: Option<u32>,
}

impl Caps {
    /// `--max-active-jobs`, and `spec.maxActiveJobs` (≥ 1) of the TerraformCluster over
    /// `--cluster-max-active-jobs`; a flag of 0 removes that cap.
    pub fn new(
        max_active_jobs: i64,
        cluster_max_active_jobs: i64,
        spec_override: Option<i32>,
    ) -> Self {
        let positive = |n: i64| (n > 0).then(|| u32::try_from(n).unwrap_or(u32::MAX));
        let cluster = match spec_override
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n >= 1)
        {
            Some(n) => Some(n),
            None => positive(cluster_max_active_jobs),
        };
        Caps {
            global: positive(max_active_jobs),
            cluster,
        }
    }
}

/// Why an operation waits for a slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Full {
    /// `"manager"` or `"cluster"`.
    pub scope: &'static str,
    pub running: usize,
    pub limit: u32,
    /// The limit applied to this operation (80 % of `limit` for drift and refresh).
    pub effective: usize,
}

impl std::fmt::Display for Full {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let flag = match self.scope {
            "manager" => "--max-active-jobs",
            _ => "--cluster-max-active-jobs or the TerraformCluster's spec.maxActiveJobs",
        };
        write!(
            f,
            "{} Jobs run against a {} limit of {}",
            self.running, self.scope, self.limit
        )?;
        if self.effective != self.limit as usize {
            write!(
                f,
                " (drift and refresh start only below {})",
                self.effective
            )?;
        }
        write!(f, "; it starts when one finishes, or raise {flag}")
    }
}

/// Whether `op` may start now. Caps are soft: counted from the cache, so concurrent passes can
/// overshoot by a few, but a pass that sees a cap reached never starts a Job.
pub fn check(op: Operation, running: Running, caps: Caps) -> Result<(), Full> {
    let background = matches!(op, Operation::Drift | Operation::Refresh);
    let scopes = [
        ("manager", running.global, caps.global),
        ("cluster", running.cluster, caps.cluster),
    ];
    for (scope, running, limit) in scopes {
        let Some(limit) = limit else { continue };
        let effective = if background {
            // 80 %, rounded down, but a cap of 1 still lets one check run when idle.
            ((limit as usize) * 4 / 5).max(1)
        } else {
            limit as usize
        };
        if running >= effective {
            return Err(Full {
                scope,
                running,
                limit,
                effective,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_from_flags_and_spec() {
        type Flags = (i64, i64, Option<i32>);
        let rows: [(Flags, Caps); 6] = [
            (
                (200, 20, None),
                Caps {
                    global: Some(200),
                    cluster: Some(20),
                },
            ),
            (
                (0, 0, None),
                Caps {
                    global: None,
                    cluster: None,
                },
            ),
            (
                (200, 20, Some(5)),
                Caps {
                    global: Some(200),
                    cluster: Some(5),
                },
            ),
            (
                (200, 0, Some(5)),
                Caps {
                    global: Some(200),
                    cluster: Some(5),
                },
            ),
            (
                (200, 20, Some(0)),
                Caps {
                    global: Some(200),
                    cluster: Some(20),
                },
            ),
            (
                (200, 20, Some(-3)),
                Caps {
                    global: Some(200),
                    cluster: Some(20),
                },
            ),
        ];
        for ((g, c, s), want) in rows {
            assert_eq!(Caps::new(g, c, s), want, "flags {g}/{c}, spec {s:?}");
        }
    }

    #[test]
    fn check_table() {
        let caps = Caps {
            global: Some(10),
            cluster: Some(5),
        };
        let run = |global, cluster| Running { global, cluster };
        // (op, running, caps, Ok or (scope, effective))
        type Want = Option<(&'static str, usize)>;
        let rows: Vec<(Operation, Running, Caps, Want)> = vec![
            (Operation::Apply, run(0, 0), caps, None),
            (Operation::Apply, run(9, 4), caps, None),
            (Operation::Apply, run(10, 0), caps, Some(("manager", 10))),
            (Operation::Apply, run(3, 5), caps, Some(("cluster", 5))),
            (Operation::Destroy, run(3, 5), caps, Some(("cluster", 5))),
            (Operation::Restore, run(10, 5), caps, Some(("manager", 10))),
            (Operation::Plan, run(2, 4), caps, None),
            // Background: below 80 %.
            (Operation::Drift, run(7, 3), caps, None),
            (Operation::Drift, run(8, 0), caps, Some(("manager", 8))),
            (Operation::Refresh, run(0, 4), caps, Some(("cluster", 4))),
            (Operation::Refresh, run(0, 3), caps, None),
            // A cap of 1 still admits one background Job.
            (
                Operation::Drift,
                run(0, 0),
                Caps {
                    global: None,
                    cluster: Some(1),
                },
                None,
            ),
            (
                Operation::Drift,
                run(0, 1),
                Caps {
                    global: None,
                    cluster: Some(1),
                },
                Some(("cluster", 1)),
            ),
            // No caps.
            (Operation::Apply, run(10_000, 10_000), Caps::default(), None),
        ];
        for (op, running, caps, want) in rows {
            let got = check(op, running, caps)
                .err()
                .map(|f| (f.scope, f.effective));
            assert_eq!(got, want, "{op:?} {running:?} {caps:?}");
        }
    }

    #[test]
    fn message_names_count_limit_and_flag() {
        let full = check(
            Operation::Drift,
            Running {
                global: 0,
                cluster: 4,
            },
            Caps {
                global: None,
                cluster: Some(5),
            },
        )
        .expect_err("full");
        let text = full.to_string();
        assert!(
            text.contains("4 Jobs run against a cluster limit of 5"),
            "{text}"
        );
        assert!(text.contains("below 4"), "{text}");
        assert!(text.contains("spec.maxActiveJobs"), "{text}");
    }
}
