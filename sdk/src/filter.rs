//! Which tasks a listing returns: [`TaskFilter`], the SDK's own words for the listing's query.
//!
//! A builder rather than the API's query struct, so a caller names what it wants
//! (`TaskFilter::all().namespace("shop").label("team=data")`) and the wire's field names and
//! defaults stay the client's business.

use ax_control::api::TaskQuery;

/// Which tasks [`crate::Client::list`] returns, one page at a time, in key order.
///
/// ```
/// use ax_sdk::TaskFilter;
///
/// let first = TaskFilter::all().namespace("shop").label("team=data").limit(100);
/// // With the `continue_token` of the page before, the next page of the same listing:
/// let next = first.clone().after("opaque-token-from-the-last-page");
/// assert_ne!(first, next);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskFilter {
    query: TaskQuery,
}

impl TaskFilter {
    /// Every task, the first page of the default size.
    pub fn all() -> Self {
        TaskFilter::default()
    }

    /// Only the tasks of `namespace`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.query.namespace = Some(namespace.into());
        self
    }

    /// Only the tasks in `status` (`SCHEDULED`, `PAUSED`, `FAILED`, ...; any case).
    pub fn status(mut self, status: impl Into<String>) -> Self {
        self.query.status = Some(status.into());
        self
    }

    /// Only the tasks with a label: `key` (any value) or `key=value`.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.query.label = Some(label.into());
        self
    }

    /// Only the tasks whose id contains `text` (any case).
    pub fn id_contains(mut self, text: impl Into<String>) -> Self {
        self.query.search = Some(text.into());
        self
    }

    /// At most `limit` tasks a page (1 to 1000; the server's default otherwise).
    pub fn limit(mut self, limit: usize) -> Self {
        self.query.limit = Some(limit);
        self
    }

    /// The page after the one whose `continue_token` this is.
    pub fn after(mut self, continue_token: impl Into<String>) -> Self {
        self.query.continue_token = Some(continue_token.into());
        self
    }

    /// The specs' secrets shown instead of `***` (an admin's token, over HTTP).
    pub fn show_secrets(mut self) -> Self {
        self.query.show_secrets = true;
        self
    }

    pub(crate) fn into_query(self) -> TaskQuery {
        self.query
    }
}
