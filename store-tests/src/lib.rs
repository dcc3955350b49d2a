//! The conformance suite every [`RunStore`] runs: one list of cases pinning the port's
//! `# Contract` (see `fronta_engine::store`) and the [`fronta_engine::Worker`] driven
//! against it. A store crate implements [`StoreFactory`] and writes, in
//! `tests/conformance.rs`:
//!
//! ```text
//! fronta_store_tests::conformance_suite!(MyFactory::new());
//! ```
//!
//! and gets every case as its own named test. New store behaviour goes into this suite
//! first (a case here and a line in [`conformance_suite!`]), then every store passes it.
//!
//! What it leaves out: store-specific checks (migrations, pragmas, the claim query's
//! plan) stay in each store's own tests. Time is an input: every case hands the store a
//! [`ManualClock`] and moves it instead of sleeping; only the worker's own timers
//! (heartbeat, timeout, poll) run on tokio's real time, with short leases.

use std::sync::Arc;

use fronta_engine::{ManualClock, RunStore};

pub mod store_cases;
mod support;
pub mod worker_cases;

/// Re-exported so a store's `tests/conformance.rs` needs no `async-trait` of its own.
pub use async_trait::async_trait;

/// Opens fresh stores for the suite.
#[async_trait]
pub trait StoreFactory: Send + Sync {
    /// A fresh, empty store whose clock is `clock`: every instant it writes or compares
    /// (due times, leases) must come from this clock, so the cases can move time.
    ///
    /// Each call is a separate database; the suite shares the returned `Arc` between
    /// workers when it needs two handles on one store.
    async fn open(&self, clock: ManualClock) -> Arc<dyn RunStore>;
}

/// Not public API: what [`conformance_suite!`] expands to needs.
#[doc(hidden)]
pub mod __private {
    use std::future::Future;

    /// Run one case on a fresh multi-threaded runtime with two worker threads — what
    /// `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]` does, without asking
    /// the store crate to depend on tokio's macros.
    pub fn run_case<F: Future<Output = ()>>(case: F) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("invariant: a test runtime can be built");
        runtime.block_on(case);
    }
}

/// Expands to one `#[test]` per conformance case, each on a two-thread tokio runtime,
/// each opening its own store from `$factory` (an expression evaluated once per test).
///
/// The list below is the only list of cases: a new case is a `pub async fn` in
/// [`store_cases`] or [`worker_cases`] and one line here.
#[macro_export]
macro_rules! conformance_suite {
    ($factory:expr) => {
        $crate::conformance_suite!(@cases $factory;
            // Enqueue.
            store_cases::enqueue_inserts_pending_runs_due_now_or_later,
            store_cases::enqueue_many_answers_in_input_order,
            store_cases::enqueue_wakes_the_enqueue_signal,
            store_cases::delayed_run_is_claimed_only_once_its_time_has_come,
            store_cases::unique_key_held_by_a_pending_or_running_run_returns_it,
            store_cases::unique_key_is_freed_when_its_run_ends,
            store_cases::unique_key_is_scoped_to_its_tenant,
            store_cases::put_back_turned_cancel_spends_no_counter,
            store_cases::unique_key_repeated_within_one_batch_inserts_once,
            store_cases::dispatcher_refuses_unknown_kind_and_negative_max_retries_and_writes_nothing,
            // Claim.
            store_cases::claim_sets_owner_status_lease_and_started_at,
            store_cases::claim_respects_its_limit,
            store_cases::claim_takes_higher_priority_first_then_earlier_run_at,
            store_cases::concurrent_claims_never_return_the_same_run,
            store_cases::claim_takes_one_run_per_tenant_before_a_second,
            store_cases::expired_lease_is_reclaimed_with_a_fresh_owner_token,
            store_cases::expired_lease_is_reclaimed_with_reclaims_not_attempts,
            store_cases::reclaim_over_max_reclaims_fails_the_run_as_a_crash_loop,
            // Owner-checked writes.
            store_cases::fenced_owner_writes_are_lease_lost_and_change_nothing,
            store_cases::expired_but_unreclaimed_lease_still_accepts_its_owner,
            store_cases::heartbeat_renews_the_lease_from_now,
            store_cases::checkpoint_stores_state_and_renews_the_lease,
            store_cases::finish_actions_write_what_they_say,
            store_cases::finish_of_a_run_no_longer_running_is_lease_lost,
            // Cancel.
            store_cases::cancel_of_a_pending_run_cancels_it_at_once,
            store_cases::cancel_of_a_running_run_is_requested_and_delivered_by_heartbeat,
            store_cases::cancel_request_turns_putting_back_into_cancelled,
            store_cases::cancel_requested_run_whose_lease_expires_is_cancelled_by_the_next_claim,
            store_cases::cancel_of_a_finished_or_unknown_run_changes_nothing,
            // Reads.
            store_cases::run_list_is_newest_first_with_filters_limit_and_cursor,
            store_cases::run_stats_counts_every_status,
            // The worker against the store.
            worker_cases::worker_drains_many_runs_each_exactly_once,
            worker_cases::worker_parks_an_unknown_kind_then_fails_it_on_the_fifth_time,
            worker_cases::retry_without_a_delay_follows_the_default_ladder,
            worker_cases::per_kind_ladder_replaces_the_default,
            worker_cases::retry_after_is_honoured,
            worker_cases::retry_with_no_retries_left_fails_the_run,
            worker_cases::snooze_reschedules_without_spending_an_attempt,
            worker_cases::panicking_handler_fails_its_run_and_the_worker_goes_on,
            worker_cases::handler_past_its_timeout_is_retried,
            worker_cases::cancel_reaches_a_running_handler_through_the_heartbeat,
            worker_cases::durable_handler_resumes_from_its_checkpoint_after_a_crash,
            worker_cases::fenced_worker_abandons_its_run_and_writes_nothing,
            worker_cases::heartbeat_that_finds_the_lease_lost_abandons_the_run,
            worker_cases::shutdown_gives_running_runs_back_without_spending_counters,
            worker_cases::dropped_worker_stops_renewing_its_leases,
            worker_cases::worker_refuses_a_lease_under_a_millisecond,
        );
    };
    (@cases $factory:expr; $($module:ident :: $case:ident),+ $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::__private::run_case(async {
                    $crate::$module::$case(&$factory).await;
                });
            }
        )+
    };
}
