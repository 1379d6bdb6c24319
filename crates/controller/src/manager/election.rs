//! Leader election on a Lease. kube-lease-manager takes and renews the Lease; around it, a
//! candidate looks at the Lease every `--leader-elect-retry-period` and lets the library try only
//! once it is free, and a leader stopped by a signal lets its running passes finish and then
//! releases the Lease. The library alone would leave a candidate asleep until the holder's Lease
//! runs out, so a released Lease would still cost the standby a whole lease duration.

use std::future::Future;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::settings::ManagerArgs;

/// How long running passes get to finish after SIGTERM (controller-runtime's
/// `GracefulShutdownTimeout`), before the manager stops anyway.
pub const GRACEFUL_SHUTDOWN: Duration = Duration::from_secs(20);

/// How long the library gets to take a Lease the candidate saw free before the candidate looks
/// again: taking an expired Lease is a release, a pause of up to a second and two writes.
const TAKE_WITHIN: Duration = Duration::from_secs(5);

/// How long a stopping leader waits for its release to be written.
const RELEASE_WITHIN: Duration = Duration::from_secs(5);

/// Whether a candidate should try to take the Lease: nobody holds it, or its holder has not
/// renewed it for its whole duration. It reads the Lease as kube-lease-manager does (a Lease
/// without a renew time or a duration has run out), so the library takes what this lets through.
pub fn is_free(spec: Option<&LeaseSpec>, now: SystemTime) -> bool {
    let Some(spec) = spec else { return true };
    if spec.holder_identity.is_none() {
        return true;
    }
    let (Some(renewed), Some(seconds)) = (&spec.renew_time, spec.lease_duration_seconds) else {
        return true;
    };
    let renewed: SystemTime = renewed.0.into();
    let seconds = u64::try_from(seconds).unwrap_or(0);
    renewed + Duration::from_secs(seconds) < now
}

/// The Lease this replica campaigns for, and how.
pub struct Election {
    client: Client,
    namespace: String,
    name: String,
    identity: String,
    lease_seconds: u64,
    grace_seconds: u64,
    retry: Duration,
}

/// Holding the Lease: `leading` turns false when it is lost; `renewing` is the library's task,
/// which releases the Lease once `leading` is dropped.
pub struct Leadership {
    pub leading: watch::Receiver<bool>,
    renewing: JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>,
}

impl Election {
    pub fn new(client: Client, args: &ManagerArgs, namespace: &str, identity: String) -> Self {
        let lease_seconds = args.leader_elect_lease_duration.as_secs().max(2);
        // The library renews `grace` before the Lease would run out: a renew deadline of 10 s
        // in a 15 s Lease renews 5 s before the end.
        let grace_seconds = lease_seconds
            .saturating_sub(args.leader_elect_renew_deadline.as_secs())
            .clamp(1, lease_seconds - 1);
        Election {
            client,
            namespace: namespace.to_owned(),
            name: args.leader_elect_lease_name.clone(),
            identity,
            lease_seconds,
            grace_seconds,
            retry: args.leader_elect_retry_period,
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Campaigns until this replica holds the Lease, or `None` once `stop` fires first.
    pub async fn campaign(&self, stop: impl Future<Output = ()>) -> Option<Leadership> {
        tokio::pin!(stop);
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.namespace);
        loop {
            tokio::select! {
                () = self.until_free(&leases) => {},
                () = &mut stop => return None,
            }
            let Some(mut held) = self.try_take().await else {
                tokio::select! {
                    () = tokio::time::sleep(self.retry) => continue,
                    () = &mut stop => return None,
                }
            };
            let taken = tokio::time::timeout(self.retry.max(TAKE_WITHIN), async {
                held.leading.wait_for(|leading| *leading).await.is_ok()
            });
            let taken = tokio::select! {
                taken = taken => matches!(taken, Ok(true)),
                () = &mut stop => {
                    held.release().await;
                    return None;
                }
            };
            if taken {
                return Some(held);
            }
            // Another candidate was faster: the library would now sleep until that one's Lease
            // runs out, so go back to looking every retry period.
            tracing::debug!(lease = %self.name, "another replica took the Lease");
            held.release().await;
        }
    }

    /// Returns once a read of the Lease finds it free; reads every retry period.
    async fn until_free(&self, leases: &Api<Lease>) {
        loop {
            match leases.get_opt(&self.name).await {
                Ok(lease)
                    if is_free(
                        lease.as_ref().and_then(|l| l.spec.as_ref()),
                        SystemTime::now(),
                    ) =>
                {
                    return;
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, lease = %self.name, "cannot read the leader-election Lease; retrying");
                }
            }
            tokio::time::sleep(self.retry).await;
        }
    }

    /// Starts the library on the Lease; `None` (logged) when it cannot read or create it.
    async fn try_take(&self) -> Option<Leadership> {
        let built = kube_lease_manager::LeaseManagerBuilder::new(self.client.clone(), &self.name)
            .with_namespace(&self.namespace)
            .with_identity(&self.identity)
            .with_duration(self.lease_seconds)
            .with_grace(self.grace_seconds)
            .build()
            .await;
        match built {
            Ok(manager) => {
                let (leading, renewing) = manager.watch().await;
                Some(Leadership { leading, renewing })
            }
            Err(error) => {
                tracing::warn!(%error, lease = %self.name, "cannot take the leader-election Lease; retrying");
                None
            }
        }
    }
}

impl Leadership {
    /// Stops renewing and, if this replica holds the Lease, clears its holder so that a
    /// candidate takes it at its next look. Returns whether the release was written.
    pub async fn release(self) -> bool {
        let Leadership { leading, renewing } = self;
        // Dropping the last receiver is what tells the library to release and end.
        drop(leading);
        matches!(
            tokio::time::timeout(RELEASE_WITHIN, renewing).await,
            Ok(Ok(Ok(_)))
        )
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn lease(holder: Option<&str>, renewed_ago: Option<u64>, seconds: Option<i32>) -> LeaseSpec {
        let now = Timestamp::from_second(1_000_000).unwrap_or(Timestamp::UNIX_EPOCH);
        LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            renew_time: renewed_ago.map(|ago| {
                MicroTime(now - k8s_openapi::jiff::SignedDuration::from_secs(ago as i64))
            }),
            lease_duration_seconds: seconds,
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn a_candidate_tries_only_a_lease_nobody_holds_or_nobody_renews() -> anyhow::Result<()> {
        let now: SystemTime = Timestamp::from_second(1_000_000)?.into();
        let cases = [
            ("no Lease yet", None, true),
            ("released (no holder)", Some(lease(None, None, None)), true),
            (
                "held, renewed 3 s ago",
                Some(lease(Some("a"), Some(3), Some(15))),
                false,
            ),
            (
                "held, renewed 15 s ago (the last second)",
                Some(lease(Some("a"), Some(15), Some(15))),
                false,
            ),
            (
                "held, renewed 16 s ago",
                Some(lease(Some("a"), Some(16), Some(15))),
                true,
            ),
            (
                "held, never renewed",
                Some(lease(Some("a"), None, Some(15))),
                true,
            ),
            (
                "held, no duration",
                Some(lease(Some("a"), Some(1), None)),
                true,
            ),
            (
                "held by an empty identity, renewed",
                Some(lease(Some(""), Some(1), Some(15))),
                false,
            ),
        ];
        for (case, spec, want) in cases {
            assert_eq!(is_free(spec.as_ref(), now), want, "{case}");
        }
        Ok(())
    }
}
