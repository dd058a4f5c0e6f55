//! Many requests at once, for filling a test cluster.

use futures::StreamExt;

/// Runs `f` on every item, `limit` at a time; the first error, if any.
pub async fn each<I, F, Fut>(limit: usize, items: I, f: F) -> anyhow::Result<()>
where
    I: IntoIterator,
    F: FnMut(I::Item) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    futures::stream::iter(items)
        .map(f)
        .buffer_unordered(limit)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}
