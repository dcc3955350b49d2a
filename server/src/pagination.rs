//! Pagination, one shape for every list: `?limit=&cursor=` in, `{"items": […],
//! "nextCursor": "…" | null}` out. A cursor is opaque to clients: pass back the
//! `nextCursor` of the previous page; `null` means there is nothing after this page.
//!
//! Lists the store pages itself (runs, tickets) have store cursors; the short lists held
//! in memory (groups, members, ticket types, automations, tenants, incidents) are paged
//! here by id ([`page_by_id`]): UUIDv7 ids sort by creation.
//!
//! Left out: filters (each route has its own).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::config::ServerConfig;
use crate::error::ApiError;

/// `?limit=&cursor=`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
pub struct PageParams {
    /// Items on the page (default `--page-default`, at most `--page-max`).
    #[schemars(range(min = 1))]
    pub limit: Option<usize>,
    /// The `nextCursor` of the page before.
    pub cursor: Option<String>,
}

impl crate::extract::QueryKeys for PageParams {
    const KEYS: &'static [&'static str] = &["limit", "cursor"];
}

impl PageParams {
    /// The page size: the default when absent, clamped to `page_max`; 0 is refused.
    pub fn size(&self, config: &ServerConfig) -> Result<usize, ApiError> {
        match self.limit {
            None => Ok(config.page_default),
            Some(0) => Err(ApiError::bad_request("limit must be at least 1")),
            Some(limit) => Ok(limit.min(config.page_max)),
        }
    }

    /// The cursor as an id (every id-based list's cursor).
    pub fn cursor_id(&self) -> Result<Option<Uuid>, ApiError> {
        self.cursor
            .as_deref()
            .filter(|cursor| !cursor.is_empty())
            .map(|cursor| {
                Uuid::parse_str(cursor).map_err(|_| ApiError::BadRequest {
                    code: "invalid_cursor",
                    message: "the cursor is not one this list gave out".into(),
                })
            })
            .transpose()
    }
}

/// One page of a list.
#[derive(schemars::JsonSchema, Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "PageOf{T}")]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

/// Which end of a list comes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    OldestFirst,
    NewestFirst,
}

/// Page a list held in memory by its ids (UUIDv7: creation order).
pub fn page_by_id<T, V>(
    mut items: Vec<T>,
    id: impl Fn(&T) -> Uuid,
    order: Order,
    params: &PageParams,
    config: &ServerConfig,
    view: impl Fn(T) -> V,
) -> Result<Page<V>, ApiError> {
    let size = params.size(config)?;
    let cursor = params.cursor_id()?;
    items.sort_by_key(|item| id(item));
    if order == Order::NewestFirst {
        items.reverse();
    }
    let after_cursor = |item: &T| match (cursor, order) {
        (None, _) => true,
        (Some(cursor), Order::OldestFirst) => id(item) > cursor,
        (Some(cursor), Order::NewestFirst) => id(item) < cursor,
    };
    let mut rest: Vec<T> = items.into_iter().filter(after_cursor).collect();
    let more = rest.len() > size;
    rest.truncate(size);
    let next_cursor = if more {
        rest.last().map(|item| id(item).to_string())
    } else {
        None
    };
    Ok(Page {
        items: rest.into_iter().map(view).collect(),
        next_cursor,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ServerConfig {
        ServerConfig {
            page_default: 2,
            page_max: 3,
            ..ServerConfig::default()
        }
    }

    #[test]
    fn pages_walk_the_whole_list_once_in_order() {
        let ids: Vec<Uuid> = (0..5).map(|_| Uuid::now_v7()).collect();
        let mut seen = Vec::new();
        let mut params = PageParams::default();
        loop {
            let page = page_by_id(
                ids.clone(),
                |id| *id,
                Order::OldestFirst,
                &params,
                &config(),
                |id| id,
            )
            .expect("a page");
            assert!(page.items.len() <= 2, "default size");
            seen.extend(page.items);
            match page.next_cursor {
                Some(cursor) => params.cursor = Some(cursor),
                None => break,
            }
        }
        assert_eq!(seen, ids, "every item once, oldest first");
    }

    #[test]
    fn newest_first_and_limits_are_clamped() {
        let ids: Vec<Uuid> = (0..5).map(|_| Uuid::now_v7()).collect();
        let params = PageParams {
            limit: Some(100),
            cursor: None,
        };
        let page = page_by_id(
            ids.clone(),
            |id| *id,
            Order::NewestFirst,
            &params,
            &config(),
            |id| id,
        )
        .expect("a page");
        assert_eq!(
            page.items,
            vec![ids[4], ids[3], ids[2]],
            "clamped to page_max, newest first"
        );
        assert_eq!(page.next_cursor, Some(ids[2].to_string()), "more to come");
        let bad = PageParams {
            limit: None,
            cursor: Some("nope".into()),
        };
        assert!(
            page_by_id(ids, |id| *id, Order::NewestFirst, &bad, &config(), |id| id).is_err(),
            "a foreign cursor is a 400"
        );
    }
}
