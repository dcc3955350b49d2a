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
//! The desk port (`fronta_desk::DeskStore`) has its own list: a store implements
//! [`DeskStoreFactory`] and writes `fronta_store_tests::desk_conformance_suite!(…)` in
//! `tests/desk_conformance.rs` (cases in [`desk_cases`]).
//!
//! The automation port (`fronta_automation::store::AutomationStore`) and the ticket event
//! sink have a third list: a store implements [`AutomationStoreFactory`] and writes
//! `fronta_store_tests::automation_conformance_suite!(…)` in
//! `tests/automation_conformance.rs` (cases in [`automation_cases`]); the secrets port
//! (`fronta_automation::secrets::SecretStore`) is pinned in the same list.
//!
//! What it leaves out: store-specific checks (migrations, pragmas, the claim query's
//! plan) stay in each store's own tests. Time is an input: every case hands the store a
//! [`ManualClock`] and moves it instead of sleeping; only the worker's own timers
//! (heartbeat, timeout, poll) run on tokio's real time, with short leases.

use std::sync::Arc;

use fronta_automation::store::{AutomationStore, TicketEventSink};
use fronta_engine::{ManualClock, RunStore};

pub mod access_cases;
pub mod automation_cases;
pub mod bulk_cases;
pub mod desk_cases;
pub mod limits_cases;
pub mod mail_cases;
pub mod poll_cases;
pub mod prefetch_cases;
pub mod race_cases;
pub mod room_cases;
pub mod scenario_cases;
pub mod store_cases;
mod support;
pub mod takeover_cases;
pub mod widget_cases;
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

/// Opens fresh desk stores for the desk suite ([`desk_conformance_suite!`]).
#[async_trait]
pub trait DeskStoreFactory: Send + Sync {
    /// A fresh, empty desk store: no tenants. Each call is a separate database.
    async fn open_desk(&self) -> Arc<dyn fronta_desk::DeskStore>;
    /// A fresh, empty store's desk and access ports (one database).
    async fn open_access(
        &self,
    ) -> (
        Arc<dyn fronta_desk::DeskStore>,
        Arc<dyn fronta_desk::access::AccessStore>,
    );
}

/// Opens fresh stores for the automation suite ([`automation_conformance_suite!`]).
#[async_trait]
pub trait AutomationStoreFactory: Send + Sync {
    /// A fresh, empty store: no tenants. Both handles are the same database (the desk
    /// one creates the tenants and tickets the automations and the loop guard refer to).
    async fn open_automations(&self)
    -> (Arc<dyn AutomationStore>, Arc<dyn fronta_desk::DeskStore>);

    /// A fresh, empty store with `sink` installed as its ticket event sink (installing
    /// one is store-specific). Both handles are the same database: the runs the sink
    /// answers are read back through the run store.
    async fn open_with_sink(
        &self,
        sink: TicketEventSink,
    ) -> (
        Arc<dyn fronta_desk::DeskStore>,
        Arc<dyn RunStore>,
        Arc<dyn fronta_automation::store::AutomationStore>,
    );

    /// A fresh, empty store's secrets port; both handles are the same database (the desk
    /// one creates the tenants).
    async fn open_secrets(
        &self,
    ) -> (
        Arc<dyn fronta_automation::secrets::SecretStore>,
        Arc<dyn fronta_desk::DeskStore>,
    );

    /// A fresh, empty store whose clock is `clock` (a rotated webhook token's or signing
    /// secret's grace is judged by it); both handles are the same database.
    async fn open_automations_at(
        &self,
        clock: ManualClock,
    ) -> (Arc<dyn AutomationStore>, Arc<dyn fronta_desk::DeskStore>);

    /// A fresh, empty store's service limits port whose clock is `clock` (slot leases and
    /// cool-downs are judged by it); both handles are the same database.
    async fn open_limits(
        &self,
        clock: ManualClock,
    ) -> (
        Arc<dyn fronta_automation::service_limits::ServiceLimits>,
        Arc<dyn fronta_desk::DeskStore>,
    );

    /// A fresh, empty store's poll cursors port; every handle is the same database (the
    /// desk one creates the tenants, the automation one the poll automations).
    async fn open_poll_cursors(
        &self,
    ) -> (
        Arc<dyn fronta_automation::poll::PollCursors>,
        Arc<dyn AutomationStore>,
        Arc<dyn fronta_desk::DeskStore>,
    );

    /// A fresh, empty store's MCP servers port; both handles are the same database (the
    /// desk one creates the tenants).
    async fn open_mcp_servers(
        &self,
    ) -> (
        Arc<dyn fronta_automation::mcp::McpServerStore>,
        Arc<dyn fronta_desk::DeskStore>,
    );

    /// A fresh, empty store's mail servers port; both handles are the same database (the
    /// desk one creates the tenants).
    async fn open_mail_servers(
        &self,
    ) -> (
        Arc<dyn fronta_automation::mail::MailServerStore>,
        Arc<dyn fronta_desk::DeskStore>,
    );

    /// A fresh, empty store's widgets port whose clock is `clock` (freshness and leases
    /// are judged by it); both handles are the same database.
    async fn open_widgets(
        &self,
        clock: ManualClock,
    ) -> (
        Arc<dyn fronta_automation::widget::WidgetStore>,
        Arc<dyn fronta_desk::DeskStore>,
    );
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
            store_cases::find_by_key_finds_finished_runs_and_the_newest,
            store_cases::manual_retry_requeues_a_failed_run_from_its_checkpoint,
            store_cases::a_suppressed_run_is_terminal_and_started_by_a_manual_retry,
            store_cases::prune_deletes_only_finished_runs_past_their_end_in_bounded_batches,
            store_cases::manual_retry_never_breaks_a_unique_key,
            store_cases::run_busy_tells_running_or_due_runs_from_idle,
            store_cases::put_back_turned_cancel_spends_no_counter,
            store_cases::unique_key_repeated_within_one_batch_inserts_once,
            store_cases::dispatcher_refuses_unknown_kind_and_negative_max_retries_and_writes_nothing,
            // Hand-off (enqueue straight into an idle worker).
            store_cases::hand_off_inserts_a_run_already_claimed_when_nothing_is_due,
            store_cases::hand_off_queues_a_run_that_would_overtake_a_due_one,
            worker_cases::idle_worker_takes_its_own_enqueues_by_hand_off,
            worker_cases::hand_offs_racing_claims_keep_the_slots_and_run_each_once,
            worker_cases::worker_without_hand_off_claims_every_run,
            // The process registry and takeovers.
            takeover_cases::registry_keeps_processes_with_their_facts_and_beats,
            takeover_cases::takeover_releases_the_dead_holder_s_runs_at_once_and_fences_it,
            takeover_cases::liveness_takes_over_a_gone_pid_at_once_and_a_silent_remote_after_the_timeout,
            // Claim.
            store_cases::claim_sets_owner_status_lease_and_started_at,
            store_cases::claim_respects_its_limit,
            store_cases::claim_takes_higher_priority_first_then_earlier_run_at,
            store_cases::concurrent_claims_never_return_the_same_run,
            store_cases::claim_takes_one_run_per_tenant_before_a_second,
            store_cases::expired_lease_is_reclaimed_with_a_fresh_owner_token,
            store_cases::expired_lease_is_reclaimed_with_reclaims_not_attempts,
            store_cases::completion_clears_the_error_of_an_earlier_attempt,
            store_cases::reclaim_over_max_reclaims_fails_the_run_as_a_crash_loop,
            // Owner-checked writes.
            store_cases::fenced_owner_writes_are_lease_lost_and_change_nothing,
            store_cases::expired_but_unreclaimed_lease_still_accepts_its_owner,
            store_cases::heartbeat_renews_the_lease_from_now,
            store_cases::checkpoint_stores_state_and_renews_the_lease,
            store_cases::finish_actions_write_what_they_say,
            store_cases::finish_of_a_run_no_longer_running_is_lease_lost,
            store_cases::batched_writes_answer_each_entry_by_its_own_token,
            store_cases::finish_and_claim_writes_the_finishes_then_claims,
            // Cancel.
            store_cases::cancel_of_a_pending_run_cancels_it_at_once,
            store_cases::cancel_of_a_running_run_is_requested_and_delivered_by_heartbeat,
            store_cases::cancel_request_turns_putting_back_into_cancelled,
            store_cases::cancel_requested_run_whose_lease_expires_is_cancelled_by_the_next_claim,
            store_cases::cancel_of_a_finished_or_unknown_run_changes_nothing,
            race_cases::cancels_racing_claims_and_finishes_never_lose_a_cancel,
            // Bulk actions.
            bulk_cases::a_bulk_retry_replayed_after_a_crash_retries_no_run_twice,
            bulk_cases::a_bulk_cancel_replayed_after_a_crash_cancels_each_run_once,
            bulk_cases::batched_retries_and_cancels_answer_each_run_and_a_conflict_fails_alone,
            bulk_cases::a_cancelled_bulk_action_stops_between_two_pages_and_keeps_what_it_did,
            // Reads.
            store_cases::run_list_is_newest_first_with_filters_limit_and_cursor,
            store_cases::run_stats_counts_every_status,
            store_cases::run_stats_follow_every_write_into_and_out_of_finished,
            // Readiness.
            store_cases::store_ready_answers_a_working_store_and_changes_nothing,
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
            // The worker's local queue.
            prefetch_cases::a_stuck_worker_hands_its_queued_runs_to_an_idle_one,
            prefetch_cases::tenants_take_turns_through_the_local_queue,
            prefetch_cases::shutdown_gives_queued_runs_back_without_spending_counters,
            prefetch_cases::queued_runs_of_a_dead_worker_are_reclaimed_counting_one_reclaim,
            prefetch_cases::a_cancel_reaches_a_queued_run_before_it_starts,
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

/// Expands to one `#[test]` per desk case ([`desk_cases`], pinning the `DeskStore`
/// `# Contract`), each on a two-thread tokio runtime, each opening its own store from
/// `$factory` (an expression evaluated once per test, implementing [`DeskStoreFactory`]).
///
/// The list below is the only list of desk cases: a new case is a `pub async fn` in
/// [`desk_cases`] and one line here.
#[macro_export]
macro_rules! desk_conformance_suite {
    ($factory:expr) => {
        $crate::desk_conformance_suite!(@cases $factory;
            // Tenants and names.
            tenant_token_is_found_by_its_hash_only,
            tenant_list_shows_every_tenant_in_creation_order,
            names_must_be_one_to_two_hundred_characters,
            group_and_ticket_type_names_are_unique_within_a_tenant,
            writes_for_an_unknown_tenant_are_not_found,
            // Groups, members, ticket types.
            groups_are_created_read_listed_renamed_and_deleted,
            members_are_added_listed_updated_and_deleted,
            ticket_types_keep_their_statuses_and_fields,
            ticket_type_update_changes_only_what_it_is_given,
            ticket_type_update_keeps_names_unique_within_a_tenant,
            ticket_type_update_keeps_statuses_open_tickets_hold,
            ticket_type_rename_carries_to_its_tickets,
            deleting_a_member_unassigns_its_open_tickets_and_keeps_closed_ones,
            deleting_a_group_removes_its_members_and_keeps_its_tickets,
            renaming_a_member_or_a_group_shows_on_their_tickets,
            // Tenant isolation.
            another_tenants_ids_answer_exactly_like_unknown_ids,
            lists_never_show_another_tenants_rows,
            // Tickets.
            ticket_numbers_count_from_one_per_tenant_independently,
            upsert_creates_a_ticket_with_what_it_names,
            upsert_with_a_known_external_id_attaches_instead_of_creating,
            upsert_applies_to_an_existing_ticket_only_what_on_existing_names,
            concurrent_upserts_of_one_external_id_create_one_ticket,
            status_outside_the_type_is_refused_naming_the_allowed_ones,
            status_on_a_ticket_without_a_type_is_refused,
            changing_the_type_rechecks_the_current_status,
            custom_fields_must_fit_the_ticket_type,
            refused_ticket_write_leaves_no_trace,
            ticket_change_reports_each_changed_field_from_and_to,
            change_that_changes_nothing_logs_nothing,
            tags_are_a_set_in_first_seen_order,
            every_ticket_write_logs_what_changed_and_who,
            ticket_log_append_adds_the_entry_as_given,
            // Least busy.
            least_busy_assigns_to_the_member_with_fewest_open_tickets,
            closed_tickets_do_not_count_towards_least_busy,
            a_dry_run_reads_what_the_writes_read,
            a_tenants_own_retention_is_kept_and_cleared,
            recent_incidents_are_the_ones_changed_last,
            least_busy_tie_goes_to_the_lowest_open_to_capacity_ratio,
            warehouse_of_three_gets_two_orders_to_two_different_people,
            concurrent_least_busy_assignments_spread_evenly,
            least_busy_in_an_unknown_or_empty_group_is_refused,
            least_busy_again_keeps_the_assignee_and_logs_why,
            // Incidents.
            incident_report_opens_one_with_its_faces,
            same_cause_while_open_bumps_the_count_instead_of_opening_another,
            after_resolve_the_same_cause_opens_a_new_incident,
            incidents_are_scoped_to_their_tenant_and_the_admin_sees_all,
            // Listing tickets.
            ticket_list_filters_by_status_tag_closed_assignee_and_type,
            ticket_list_is_newest_first_and_pages_by_number,
        );
        $crate::desk_conformance_suite!(@access $factory;
            // Tokens and the audit log.
            named_tokens_have_roles_and_revocation_is_at_once,
            an_expired_token_finds_nothing,
            admin_tokens_are_made_found_and_revoked,
            an_audit_entry_commits_with_its_change_only,
        );
    };
    (@cases $factory:expr; $($case:ident),+ $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::__private::run_case(async {
                    $crate::desk_cases::$case(&$factory).await;
                });
            }
        )+
    };
    (@access $factory:expr; $($case:ident),+ $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::__private::run_case(async {
                    $crate::access_cases::$case(&$factory).await;
                });
            }
        )+
    };
}

/// Expands to one `#[test]` per automation case ([`automation_cases`], pinning the
/// `AutomationStore` `# Contract` and the ticket event sink of the `DeskStore` contract),
/// each on a two-thread tokio runtime, each opening its own store from `$factory` (an
/// expression evaluated once per test, implementing [`AutomationStoreFactory`]).
///
/// The list below is the only list of automation cases: a new case is a `pub async fn`
/// in [`automation_cases`] and one line here.
#[macro_export]
macro_rules! automation_conformance_suite {
    ($factory:expr) => {
        $crate::automation_conformance_suite!(@cases $factory;
            // Saved automations.
            automations_are_created_read_listed_updated_and_deleted,
            automation_names_are_unique_within_a_tenant,
            automation_save_checks_the_name_first_and_quotes_a_taken_one,
            automation_list_is_ordered_by_name,
            a_setup_is_written_whole_or_not_at_all,
            renames_keep_automations_working_and_what_they_use_stays,
            // Tenant isolation.
            another_tenants_automation_answers_exactly_like_an_unknown_one,
            lists_never_show_another_tenants_automations,
            // Webhook tokens.
            webhook_automation_gets_a_random_unguessable_token_and_others_none,
            webhook_token_is_kept_across_updates_also_when_the_trigger_changes_away_and_back,
            a_rotated_webhook_token_answers_for_its_grace_then_finds_nothing,
            a_rotated_signing_secret_is_kept_for_its_overlap_and_refusals_change_nothing,
            // Event listeners.
            automations_for_event_answers_the_enabled_listeners_oldest_first,
            disabling_an_automation_removes_it_from_its_event_and_get_shows_it,
            // The loop guard.
            guard_admits_five_runs_a_minute_and_refuses_the_sixth,
            guard_admits_again_once_the_window_has_passed,
            guard_counts_each_automation_and_ticket_separately,
            concurrent_guard_admissions_admit_exactly_the_limit,
            // The ticket event sink.
            ticket_create_emits_one_created_event_and_its_run_commits_with_it,
            ticket_changes_emit_changed_events_with_the_change_and_the_origin,
            ticket_write_that_changes_nothing_emits_nothing,
            refused_ticket_write_emits_nothing_and_inserts_no_run,
            failing_run_insert_fails_the_ticket_write_and_leaves_no_trace,
            runs_of_ticket_events_wake_the_enqueue_signal,
            the_sink_gets_the_automations_listening_to_the_event,
            an_event_nobody_listens_to_reaches_no_sink,
            // Secrets.
            secrets_are_put_listed_read_replaced_and_deleted,
            another_tenants_secret_answers_exactly_like_a_missing_one,
            secrets_are_resealed_with_the_current_key_in_batches_and_again_changes_nothing,
            // Service limits.
            limits_cap_admits_up_to_the_limit_and_a_release_frees_a_slot,
            limits_two_concurrent_acquirers_for_the_last_slot_admit_exactly_one,
            limits_expired_slot_frees_itself,
            limits_breaker_opens_snoozes_probes_once_and_closes,
            limits_failed_probe_reopens_and_fatal_failures_do_not_count,
            limits_are_isolated_per_tenant_and_totals_count_by_state,
            // MCP servers.
            mcp_servers_are_put_listed_read_replaced_and_deleted,
            another_tenants_mcp_server_answers_exactly_like_a_missing_one,
            // Mail servers.
            mail_servers_are_put_listed_read_replaced_and_deleted,
            another_tenants_mail_server_answers_exactly_like_a_missing_one,
            // Dashboard widgets.
            widgets_are_created_listed_updated_and_deleted,
            widget_claim_serves_fresh_data_and_claims_when_stale_or_forced,
            widget_expired_lease_is_taken_over_and_the_late_answer_refused,
            widget_two_concurrent_claimers_get_exactly_one_lease,
            another_tenants_widget_answers_exactly_like_a_missing_one,
            // Poll cursors.
            poll_cursor_moves_by_compare_and_set,
            poll_cursor_racing_movers_from_one_cursor_move_it_once,
            poll_cursor_is_scoped_by_tenant_and_goes_with_its_automation,
            // Capacity as a cap, availability, runs waiting for room.
            least_busy_respects_capacity_and_availability,
            a_run_waiting_for_room_is_woken_by_a_close_in_the_group,
            a_member_back_from_away_wakes_the_waiting_runs,
            concurrent_assignments_never_exceed_capacity,
        );
    };
    (@cases $factory:expr; $($case:ident),+ $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::__private::run_case(async {
                    $crate::automation_cases::$case(&$factory).await;
                });
            }
        )+
    };
}

/// Expands to one `#[test]` per runtime scenario case ([`scenario_cases`]): the seed's
/// scenario and the executor's durability, end to end on one store through the engine.
#[macro_export]
macro_rules! runtime_scenarios {
    ($factory:expr) => {
        $crate::runtime_scenarios!(@cases $factory;
            seed_scenario_orders_and_converter_error,
            an_automation_never_triggers_itself,
            a_loop_between_two_automations_is_stopped_and_logged,
            crashed_automation_run_resumes_at_the_next_step,
            loops_count_against_max_actions_not_the_step_cap,
            long_pause_snoozes_and_resumes_at_the_next_step,
            scheduler_keeps_one_run_ahead_and_runs_missed_ticks_once,
            an_edit_during_a_pause_finishes_the_version_the_run_started_with,
            a_pause_lets_runs_finish_or_holds_them_and_never_fails_one,
            a_mistyped_field_fails_the_step_at_once_naming_it,
            a_renamed_group_is_found_by_every_version_that_names_it,
            a_failing_run_keeps_every_step_it_ran,
            a_panicking_step_fails_the_run_with_its_log_and_an_incident,
            an_optional_parameter_not_sent_is_null_and_the_run_completes,
            a_retry_is_a_line_on_the_run,
            the_loop_guard_counts_loops_not_people,
            a_failed_run_starts_its_error_workflows_once,
            an_sla_timer_fires_at_its_time_on_the_ticket_as_it_is_then,
        );
    };
    (@cases $factory:expr; $($case:ident),+ $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::__private::run_case(async {
                    $crate::scenario_cases::$case(&$factory).await;
                });
            }
        )+
    };
}
