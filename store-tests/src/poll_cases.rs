//! Poll cursor cases: the `PollCursors` port called directly, pinning its `# Contract`
//! (see `fronta_automation::poll`) — nothing before the first move, the compare-and-set
//! (`Advanced`, `AlreadyThere` for a move applied again, `Conflict` naming the stored
//! value and writing nothing), JSON values compared as values, racing movers from one
//! cursor (exactly one wins), tenant isolation (another tenant's automation answers like
//! an unknown one), and the cursor going with its automation. They run in the automation
//! suite.

use std::sync::Arc;

use fronta_automation::Automation;
use fronta_automation::poll::{Advance, PollCursors};
use fronta_automation::store::{AutomationId, AutomationStore};
use fronta_desk::{DeskError, DeskStore, TenantId};
use serde_json::json;

use crate::AutomationStoreFactory;

fn poll_automation(name: &str) -> Automation {
    Automation::from_json(
        &json!({
            "name": name,
            "trigger": {"type": "poll", "source": "http", "request": {"url": "https://shop.test/orders"},
                        "items": "body.items", "cursor": "id"},
            "steps": [],
        })
        .to_string(),
    )
    .expect("a poll automation parses")
}

async fn open(
    factory: &dyn AutomationStoreFactory,
) -> (
    Arc<dyn PollCursors>,
    Arc<dyn AutomationStore>,
    TenantId,
    AutomationId,
    Arc<dyn DeskStore>,
) {
    let (cursors, automations, desk) = factory.open_poll_cursors().await;
    let (tenant, _) = desk.tenant_create("Acme").await.expect("tenant");
    let stored = automations
        .automation_create(
            tenant.id,
            poll_automation("Orders"),
            None,
            fronta_automation::versions::BY_TENANT,
        )
        .await
        .expect("automation");
    (cursors, automations, tenant.id, stored.id, desk)
}

pub async fn poll_cursor_moves_by_compare_and_set(factory: &dyn AutomationStoreFactory) {
    let (cursors, _, tenant, automation, _) = open(factory).await;
    assert_eq!(
        cursors
            .poll_cursor_get(tenant, automation)
            .await
            .expect("get"),
        None,
        "no cursor before the first move"
    );
    let first = json!({"uidValidity": 7, "uid": 3});
    assert_eq!(
        cursors
            .poll_cursor_advance(tenant, automation, None, &first, "run-1")
            .await
            .expect("advance"),
        Advance::Advanced
    );
    let stored = cursors
        .poll_cursor_get(tenant, automation)
        .await
        .expect("get")
        .expect("a cursor");
    assert_eq!(
        (stored.value, stored.run.as_str()),
        (first.clone(), "run-1")
    );

    // The same move again (a resumed run): already there, nothing written.
    assert_eq!(
        cursors
            .poll_cursor_advance(tenant, automation, None, &first, "run-1b")
            .await
            .expect("advance"),
        Advance::AlreadyThere
    );
    // Key order does not matter: the values are compared as JSON values.
    let same_reordered = json!({"uid": 3, "uidValidity": 7});
    let second = json!({"uidValidity": 7, "uid": 9});
    assert_eq!(
        cursors
            .poll_cursor_advance(tenant, automation, Some(&same_reordered), &second, "run-2")
            .await
            .expect("advance"),
        Advance::Advanced
    );
    // A mover that started from an older cursor meets the newer one.
    assert_eq!(
        cursors
            .poll_cursor_advance(
                tenant,
                automation,
                Some(&first),
                &json!({"uidValidity": 7, "uid": 5}),
                "run-3"
            )
            .await
            .expect("advance"),
        Advance::Conflict {
            current: Some(second.clone())
        }
    );
    let stored = cursors
        .poll_cursor_get(tenant, automation)
        .await
        .expect("get")
        .expect("a cursor");
    assert_eq!(
        (stored.value, stored.run.as_str()),
        (second, "run-2"),
        "a conflict wrote nothing"
    );
}

pub async fn poll_cursor_racing_movers_from_one_cursor_move_it_once(
    factory: &dyn AutomationStoreFactory,
) {
    let (cursors, _, tenant, automation, _) = open(factory).await;
    let mut tasks = Vec::new();
    for mover in 0..6 {
        let cursors = cursors.clone();
        tasks.push(tokio::spawn(async move {
            cursors
                .poll_cursor_advance(
                    tenant,
                    automation,
                    None,
                    &json!(100 + mover),
                    &format!("run-{mover}"),
                )
                .await
                .expect("advance")
        }));
    }
    let mut advanced = 0;
    for task in tasks {
        match task.await.expect("the task ends") {
            Advance::Advanced => advanced += 1,
            Advance::Conflict { current: Some(_) } => {}
            other => panic!("a racing first move answered {other:?}"),
        }
    }
    assert_eq!(advanced, 1, "exactly one first move wins");
}

pub async fn poll_cursor_is_scoped_by_tenant_and_goes_with_its_automation(
    factory: &dyn AutomationStoreFactory,
) {
    let (cursors, automations, tenant, automation, desk) = open(factory).await;
    cursors
        .poll_cursor_advance(tenant, automation, None, &json!(5), "run-1")
        .await
        .expect("advance");
    let (other, _) = desk.tenant_create("Globex").await.expect("tenant");
    let other = other.id;
    let unknown = AutomationId::new();
    let foreign_get = cursors.poll_cursor_get(other, automation).await;
    let unknown_get = cursors.poll_cursor_get(tenant, unknown).await;
    assert!(
        matches!(foreign_get, Err(DeskError::NotFound(_))),
        "another tenant's automation: {foreign_get:?}"
    );
    assert_eq!(
        format!("{foreign_get:?}"),
        format!("{unknown_get:?}"),
        "answered exactly like an unknown one"
    );
    let foreign_move = cursors
        .poll_cursor_advance(other, automation, Some(&json!(5)), &json!(6), "run-x")
        .await;
    assert!(
        matches!(foreign_move, Err(DeskError::NotFound(_))),
        "another tenant cannot move it: {foreign_move:?}"
    );
    assert_eq!(
        cursors
            .poll_cursor_get(tenant, automation)
            .await
            .expect("get")
            .map(|cursor| cursor.value),
        Some(json!(5)),
        "unchanged"
    );

    // Editing keeps the cursor; deleting forgets it.
    let mut edited = poll_automation("Orders");
    edited.enabled = false;
    automations
        .automation_update(
            tenant,
            automation,
            edited,
            fronta_automation::versions::BY_TENANT,
        )
        .await
        .expect("update");
    assert!(
        cursors
            .poll_cursor_get(tenant, automation)
            .await
            .expect("get")
            .is_some(),
        "kept across an edit"
    );
    automations
        .automation_delete(tenant, automation)
        .await
        .expect("delete");
    let again = automations
        .automation_create(
            tenant,
            poll_automation("Orders"),
            None,
            fronta_automation::versions::BY_TENANT,
        )
        .await
        .expect("created again");
    assert_eq!(
        cursors
            .poll_cursor_get(tenant, again.id)
            .await
            .expect("get"),
        None,
        "a new automation starts without a cursor"
    );
    assert!(
        matches!(
            cursors.poll_cursor_get(tenant, automation).await,
            Err(DeskError::NotFound(_))
        ),
        "the deleted automation's cursor is gone with it"
    );
}
