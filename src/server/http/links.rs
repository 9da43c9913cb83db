//! Refusals carried in links. A form sent without the WASM bundle posts as a plain form, and leptos
//! answers a refusal with a redirect back to the page that carries it in the URL
//! (`?__path=<server fn>&__err=<base64 JSON>`); the page then shows it. Anyone can write such a URL
//! and send it round ("your account is locked: call …", shown on gpuq's own sign-in page), so
//! before a page is rendered, a refusal in its URL is cut down to what [`AppError::for_a_link`]
//! lets through, by a `303` to the same page with the cut-down refusal. The browser's address then
//! holds only that, so the page the WASM bundle hydrates reads the same.

use crate::model::AppError;
use axum::extract::{Query, Request};
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use leptos::server_fn::error::ServerFnUrlError;

/// Middleware (on the page routes): a page asked for with a refusal in its URL that says more than
/// a link may is sent to the same page with what it may say.
pub async fn refusals_in_links_carry_no_text(req: Request, next: Next) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD) {
        if let Some(location) = cut_down(req.uri()) {
            if let Ok(v) = HeaderValue::from_str(&location) {
                return (StatusCode::SEE_OTHER, [(header::LOCATION, v)]).into_response();
            }
        }
    }
    next.run(req).await
}

/// Where to send a request whose URL carries a refusal that says more than a link may; `None` when
/// it carries none, or only what may be shown.
fn cut_down(uri: &Uri) -> Option<String> {
    let Ok(Query(pairs)) = Query::<Vec<(String, String)>>::try_from_uri(uri) else {
        // A query this cannot read but that names a refusal: drop the whole query.
        let named = uri.query().is_some_and(|q| q.contains("__err"));
        return named.then(|| uri.path().to_owned());
    };
    let values = |key: &str| -> Vec<&str> {
        pairs
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    let (paths, errs) = (values("__path"), values("__err"));
    let (path, err) = (paths.first()?, errs.first()?);
    // An undecodable refusal decodes as a transport error, which is cut down like any other.
    let shown = ServerFnUrlError::<AppError>::decode_err(err);
    let safe = shown.clone().for_a_link();
    // A second `__err` or `__path` goes too: the page might read another one than this.
    if safe == shown && errs.len() == 1 && paths.len() == 1 {
        return None;
    }
    let mut here = format!(
        "http://gpuq.invalid{}",
        uri.path_and_query().map_or("/", |pq| pq.as_str())
    );
    ServerFnUrlError::<AppError>::strip_error_info(&mut here);
    let to = ServerFnUrlError::new(path, safe).to_url(&here).ok()?;
    Some(match to.query() {
        Some(q) => format!("{}?{q}", to.path()),
        None => to.path().to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::LINK_TEXT;

    fn link(path: &str, err: &AppError) -> Uri {
        let url = ServerFnUrlError::new("/api/login", err.clone())
            .to_url(&format!("http://h{path}"))
            .unwrap();
        format!("{}?{}", url.path(), url.query().unwrap())
            .parse()
            .unwrap()
    }

    #[test]
    fn words_in_a_link_are_replaced_and_the_rest_of_the_query_kept() {
        let forged = AppError::Unavailable("call 555-0100 to unlock your account".into());
        let to = cut_down(&link("/login?next=/jobs", &forged)).expect("a redirect");
        assert!(to.starts_with("/login?next=%2Fjobs&__path="), "{to}");
        let again: Uri = to.parse().unwrap();
        let Query(q) = Query::<Vec<(String, String)>>::try_from_uri(&again).unwrap();
        let err = &q.iter().find(|(k, _)| k == "__err").unwrap().1;
        let shown = ServerFnUrlError::<AppError>::decode_err(err);
        assert_eq!(shown, AppError::Unavailable(LINK_TEXT.into()));
        // What was cut down is left alone the second time: no redirect loop.
        assert_eq!(cut_down(&again), None);
    }

    #[test]
    fn a_second_refusal_in_the_same_link_is_not_let_through() {
        let forged = AppError::Forbidden("call 555-0100".into());
        let safe = link("/login", &AppError::BadCredentials).to_string();
        let evil = link("/login", &forged).to_string();
        let (safe_q, evil_q) = (
            safe.split_once('?').unwrap().1,
            evil.split_once('?').unwrap().1,
        );
        for both in [
            format!("/login?{evil_q}&{safe_q}"),
            format!("/login?{safe_q}&{evil_q}"),
        ] {
            let to = cut_down(&both.parse().unwrap()).expect("a redirect");
            assert_eq!(to.matches("__err=").count(), 1, "{to}");
            let again: Uri = to.parse().unwrap();
            assert_eq!(cut_down(&again), None, "{to}");
            let Query(q) = Query::<Vec<(String, String)>>::try_from_uri(&again).unwrap();
            let err = &q.iter().find(|(k, _)| k == "__err").unwrap().1;
            let shown = ServerFnUrlError::<AppError>::decode_err(err);
            assert!(!shown.to_string().contains("555"), "{shown}");
        }
    }

    #[test]
    fn a_refusal_with_nothing_to_cut_and_a_url_without_one_pass() {
        assert_eq!(cut_down(&link("/login", &AppError::BadCredentials)), None);
        assert_eq!(cut_down(&"/login?next=/jobs".parse().unwrap()), None);
        // Not base64, not JSON: shown as a transport error with the fixed words.
        let to = cut_down(&"/login?__path=/api/login&__err=!!!".parse().unwrap()).unwrap();
        assert!(to.starts_with("/login?__path="), "{to}");
    }
}
