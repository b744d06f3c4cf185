//! Every page of a paginated `Describe*` call: the one loop that follows EC2's `NextToken` and ELBv2's
//! `Marker`, used by every listing of the provider.

use std::future::Future;

/// Sends a paginated request until its last page: `send(token)` sends it with the continuation token of
/// the previous page (`None` for the first), `next_token` reads a page's token and `on_page` takes each
/// page, in order. An absent or empty token ends the listing; a failed page ends it with that page's error.
pub(crate) async fn for_each_page<P, E, Fut>(
    mut send: impl FnMut(Option<String>) -> Fut,
    next_token: impl Fn(&P) -> Option<&str>,
    mut on_page: impl FnMut(&P),
) -> Result<(), E>
where
    Fut: Future<Output = Result<P, E>>,
{
    let mut token = None;
    loop {
        let page = send(token).await?;
        on_page(&page);
        token = next_token(&page)
            .filter(|t| !t.is_empty())
            .map(str::to_string);
        if token.is_none() {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listing of three pages, the last with an empty token (as EC2 sometimes answers).
    async fn page(token: Option<String>) -> Result<(Vec<u32>, Option<String>), String> {
        match token.as_deref() {
            None => Ok((vec![1, 2], Some("a".into()))),
            Some("a") => Ok((vec![3], Some("b".into()))),
            Some("b") => Ok((vec![4], Some(String::new()))),
            Some(other) => Err(format!("unexpected token {other}")),
        }
    }

    #[tokio::test]
    async fn follows_tokens_until_an_absent_or_empty_one() {
        let mut tokens = Vec::new();
        let mut items: Vec<u32> = Vec::new();
        for_each_page(
            |token| {
                tokens.push(token.clone());
                page(token)
            },
            |p| p.1.as_deref(),
            |p| items.extend(p.0.iter().copied()),
        )
        .await
        .unwrap();
        assert_eq!(items, [1, 2, 3, 4]);
        assert_eq!(tokens, [None, Some("a".into()), Some("b".into())]);
    }

    #[tokio::test]
    async fn a_failed_page_ends_the_listing_with_its_error() {
        let mut items: Vec<u32> = Vec::new();
        let result = for_each_page(
            |token: Option<String>| async move {
                match token {
                    None => Ok((vec![1], Some("x".to_string()))),
                    Some(_) => Err("throttled"),
                }
            },
            |p| p.1.as_deref(),
            |p: &(Vec<u32>, Option<String>)| items.extend(p.0.iter().copied()),
        )
        .await;
        assert_eq!(result, Err("throttled"));
        assert_eq!(items, [1], "pages before the failure were taken");
    }
}
