//! The console's pages, on their own listener: sign-in, pending approvals, runs, the decision history, the
//! single-use link's page, and a server-sent event stream that tells open pages to refresh.
//!
//! Server-rendered HTML (minijinja templates, escaped) that works without JavaScript. Signed in with a token the
//! gateway's `[auth]` accepts, a person holds a session cookie (`HttpOnly`, `SameSite=Strict`, `Secure` when the
//! public URL is https) and every form carries the session's CSRF token. A principal sees its own runs; operators
//! see all. Without `[auth]` only the single-use links work.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use minijinja::{Environment, context};
use serde::Deserialize;

use super::{Answer, Console, Question, Refused};
use crate::auth::{Authenticator, Principal};

/// The session cookie's name.
const COOKIE: &str = "codemode_console";

/// The cookie that carries the sign-in form's CSRF token (double submit: no session exists yet).
const LOGIN_COOKIE: &str = "codemode_console_login";

/// The cookie that carries a link page's CSRF token (double submit: a link needs no session).
const LINK_COOKIE: &str = "codemode_console_link";

/// How long a console session lasts.
const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// The most console sessions held at once; the oldest goes first.
const MAX_SESSIONS: usize = 1_024;

/// A signed-in person.
#[derive(Clone, Debug)]
struct Session {
    principal: Principal,
    csrf: String,
    expires: std::time::Instant,
}

/// What the pages share.
struct Web {
    console: Arc<Console>,
    auth: Option<Arc<Authenticator>>,
    templates: Environment<'static>,
    sessions: Mutex<HashMap<String, Session>>,
    secure: bool,
}

type Shared = Arc<Web>;

/// Serves the console on `[console] listen` until the process ends.
///
/// # Errors
///
/// The address cannot be bound.
pub async fn serve(console: Arc<Console>, auth: Option<Arc<Authenticator>>) -> Result<(), crate::Error> {
    let addr: SocketAddr = console.config().listen;
    let secure = console.config().public_url.as_deref().is_some_and(|url| url.starts_with("https://"));
    let web = Arc::new(Web { console, auth, templates: templates(), sessions: Mutex::default(), secure });
    let app = Router::new()
        .route("/", get(pending_page))
        .route("/runs", get(runs_page))
        .route("/history", get(history_page))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/decide", post(decide))
        .route("/approve/{token}", get(link_page).post(link_decide))
        .route("/events", get(events))
        .with_state(web.clone());
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| crate::Error::Serve(format!("[console] listen {addr}: {e}")))?;
    let local = listener.local_addr().map_err(|e| crate::Error::Serve(e.to_string()))?;
    web.console.listening_on(local);
    eprintln!("codemode gateway: approval console at http://{local}/");
    axum::serve(listener, app).await.map_err(|e| crate::Error::Serve(format!("console: {e}")))
}

fn templates() -> Environment<'static> {
    let mut env = Environment::new();
    for (name, source) in [
        ("base.html", include_str!("templates/base.html")),
        ("buttons.html", include_str!("templates/buttons.html")),
        ("login.html", include_str!("templates/login.html")),
        ("pending.html", include_str!("templates/pending.html")),
        ("runs.html", include_str!("templates/runs.html")),
        ("history.html", include_str!("templates/history.html")),
        ("link.html", include_str!("templates/link.html")),
        ("message.html", include_str!("templates/message.html")),
    ] {
        // The templates are part of the binary; one that does not parse fails every test that renders a page.
        env.add_template(name, source).expect("a console template parses");
    }
    env.add_filter("when", |ms: u64| time_of(i64::try_from(ms / 1_000).unwrap_or_default()));
    env.add_filter("answer", |answer: String| Answer::parse(&answer).map_or("unknown", Answer::label));
    env
}

/// `secs` since the epoch as `YYYY-MM-DD HH:MM:SS UTC`.
fn time_of(secs: i64) -> String {
    let Ok(at) = time::OffsetDateTime::from_unix_timestamp(secs) else { return format!("{secs} s after the epoch") };
    format!("{} {:02}:{:02}:{:02} UTC", at.date(), at.hour(), at.minute(), at.second())
}

impl Web {
    fn render(&self, name: &str, ctx: minijinja::Value) -> Response {
        match self.templates.get_template(name).and_then(|t| t.render(ctx)) {
            Ok(html) => Html(html).into_response(),
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("cannot render {name}: {e}")).into_response(),
        }
    }

    fn message(&self, status: StatusCode, title: &str, text: &str, session: Option<&Session>) -> Response {
        let mut response = self.render(
            "message.html",
            context! { title, text, user => session.map(|s| s.principal.name.clone()), csrf => session.map(|s| s.csrf.clone()) },
        );
        *response.status_mut() = status;
        response
    }

    /// The signed-in session of a request, if its cookie names a live one.
    fn session(&self, headers: &HeaderMap) -> Option<Session> {
        let id = cookie(headers, COOKIE)?;
        let mut sessions = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match sessions.get(&id) {
            Some(s) if s.expires > std::time::Instant::now() => Some(s.clone()),
            Some(_) => {
                sessions.remove(&id);
                None
            }
            None => None,
        }
    }

    /// What `session` may see: `None` for an operator (everything), else its principal's owner key.
    fn viewer<'a>(&self, session: &'a Session) -> Option<&'a str> {
        (!self.console.is_operator(&session.principal.name)).then_some(session.principal.key.as_str())
    }

    fn cookie(&self, name: &str, value: &str, max_age: u64) -> HeaderValue {
        let secure = if self.secure { "; Secure" } else { "" };
        let path = if name == LINK_COOKIE { "/approve" } else { "/" };
        let text = format!("{name}={value}; Path={path}; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}");
        HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
    }
}

/// The value of cookie `name` in a request.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(';')).find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        (k == name).then(|| v.to_owned())
    })
}

/// A random 256-bit token, hex.
fn random_token() -> String {
    let bytes: Vec<u8> = (0..2).flat_map(|_| uuid::Uuid::new_v4().into_bytes()).collect();
    hex::encode(bytes)
}

/// Compares two secrets in time independent of where they differ.
fn same_secret(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq as _;
    bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

fn to_login() -> Response {
    Redirect::to("/login").into_response()
}

async fn login_page(State(web): State<Shared>, headers: HeaderMap) -> Response {
    if web.auth.is_none() {
        return web.message(
            StatusCode::FORBIDDEN,
            "Sign-in needs [auth]",
            "This gateway has no [auth] table, so the console's pages are closed. The single-use links of each \
             question still work.",
            None,
        );
    }
    if web.session(&headers).is_some() {
        return Redirect::to("/").into_response();
    }
    let csrf = random_token();
    let mut response = web.render("login.html", context! { csrf, error => None::<String> });
    response.headers_mut().append(header::SET_COOKIE, web.cookie(LOGIN_COOKIE, &csrf, 600));
    response
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
    csrf: String,
}

async fn login(State(web): State<Shared>, headers: HeaderMap, Form(form): Form<LoginForm>) -> Response {
    let Some(auth) = &web.auth else { return to_login() };
    let expected = cookie(&headers, LOGIN_COOKIE).unwrap_or_default();
    if expected.is_empty() || !same_secret(&expected, &form.csrf) {
        return web.message(StatusCode::FORBIDDEN, "Forbidden", "The form's CSRF token does not match.", None);
    }
    let principal = match auth.authenticate(form.token.trim()).await {
        Ok(principal) => principal,
        Err(rejection) => {
            let csrf = random_token();
            let mut response = web.render("login.html", context! { csrf, error => rejection.description() });
            *response.status_mut() = StatusCode::UNAUTHORIZED;
            response.headers_mut().append(header::SET_COOKIE, web.cookie(LOGIN_COOKIE, &csrf, 600));
            return response;
        }
    };
    let id = random_token();
    {
        let mut sessions = web.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = std::time::Instant::now();
        sessions.retain(|_, s| s.expires > now);
        if sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = sessions.iter().min_by_key(|(_, s)| s.expires).map(|(k, _)| k.clone())
        {
            sessions.remove(&oldest);
        }
        sessions.insert(id.clone(), Session { principal, csrf: random_token(), expires: now + SESSION_TTL });
    }
    let mut response = Redirect::to("/").into_response();
    response.headers_mut().append(header::SET_COOKIE, web.cookie(COOKIE, &id, SESSION_TTL.as_secs()));
    response.headers_mut().append(header::SET_COOKIE, web.cookie(LOGIN_COOKIE, "", 0));
    response
}

#[derive(Deserialize)]
struct CsrfForm {
    csrf: String,
}

async fn logout(State(web): State<Shared>, headers: HeaderMap, Form(form): Form<CsrfForm>) -> Response {
    if let Some(session) = web.session(&headers)
        && same_secret(&session.csrf, &form.csrf)
        && let Some(id) = cookie(&headers, COOKIE)
    {
        web.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&id);
    }
    let mut response = to_login();
    response.headers_mut().append(header::SET_COOKIE, web.cookie(COOKIE, "", 0));
    response
}

async fn pending_page(State(web): State<Shared>, headers: HeaderMap) -> Response {
    let Some(session) = web.session(&headers) else { return to_login() };
    let pending = match web.console.pending(web.viewer(&session)).await {
        Ok(pending) => pending,
        Err(e) => return web.message(StatusCode::SERVICE_UNAVAILABLE, "Unavailable", &e.to_string(), Some(&session)),
    };
    web.render(
        "pending.html",
        context! {
            page => "pending",
            user => session.principal.name,
            operator => web.viewer(&session).is_none(),
            csrf => session.csrf,
            pending,
        },
    )
}

async fn runs_page(State(web): State<Shared>, headers: HeaderMap) -> Response {
    let Some(session) = web.session(&headers) else { return to_login() };
    let viewer = web.viewer(&session);
    web.render(
        "runs.html",
        context! {
            page => "runs",
            user => session.principal.name,
            operator => viewer.is_none(),
            csrf => session.csrf,
            runs => web.console.runs(viewer),
            counts => web.console.run_counts(viewer),
        },
    )
}

async fn history_page(State(web): State<Shared>, headers: HeaderMap) -> Response {
    let Some(session) = web.session(&headers) else { return to_login() };
    let history = match web.console.history(web.viewer(&session)).await {
        Ok(history) => history,
        Err(e) => return web.message(StatusCode::SERVICE_UNAVAILABLE, "Unavailable", &e.to_string(), Some(&session)),
    };
    web.render(
        "history.html",
        context! {
            page => "history",
            user => session.principal.name,
            operator => web.viewer(&session).is_none(),
            csrf => session.csrf,
            history,
        },
    )
}

#[derive(Deserialize)]
struct DecideForm {
    run: String,
    call: String,
    answer: String,
    csrf: String,
}

async fn decide(State(web): State<Shared>, headers: HeaderMap, Form(form): Form<DecideForm>) -> Response {
    let Some(session) = web.session(&headers) else { return to_login() };
    if !same_secret(&session.csrf, &form.csrf) {
        return web.message(
            StatusCode::FORBIDDEN,
            "Forbidden",
            "The form's CSRF token does not match this session; nothing was decided. Reload the page and try again.",
            Some(&session),
        );
    }
    let Some(answer) = Answer::parse(&form.answer) else {
        return web.message(StatusCode::BAD_REQUEST, "Bad request", "Unknown answer.", Some(&session));
    };
    let viewer = web.viewer(&session).map(str::to_owned);
    let question = match web.console.pending(viewer.as_deref()).await {
        Ok(pending) => pending.into_iter().find(|q| q.run_id == form.run && q.call_id == form.call),
        Err(e) => return web.message(StatusCode::SERVICE_UNAVAILABLE, "Unavailable", &e.to_string(), Some(&session)),
    };
    let Some(question) = question else {
        let text = "There is no such pending question for you: it was answered, its run ended, or it is not yours.";
        return web.message(StatusCode::NOT_FOUND, "Not found", text, Some(&session));
    };
    match web.console.decide(question, answer, &session.principal.name).await {
        Ok(_) => Redirect::to("/").into_response(),
        Err(e) => web.message(StatusCode::CONFLICT, "Not decided", &e.to_string(), Some(&session)),
    }
}

fn refused_status(refused: &Refused) -> StatusCode {
    match refused {
        Refused::BadLink | Refused::OtherCall => StatusCode::FORBIDDEN,
        Refused::NoQuestion => StatusCode::NOT_FOUND,
        Refused::Answered(_) => StatusCode::CONFLICT,
        Refused::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

async fn link_page(State(web): State<Shared>, Path(token): Path<String>) -> Response {
    match web.console.open_link(&token).await {
        Ok(question) => link_view(&web, &question).await,
        Err(e) => web.message(refused_status(&e), "Link not valid", &e.to_string(), None),
    }
}

/// The link's page, with a fresh CSRF token in its form and its cookie.
async fn link_view(web: &Web, question: &Question) -> Response {
    let decided = web.console.decision(&question.run_id, &question.call_id).await.ok().flatten();
    let csrf = random_token();
    let mut response = web.render("link.html", context! { question, decided, csrf });
    response.headers_mut().append(header::SET_COOKIE, web.cookie(LINK_COOKIE, &csrf, 3600));
    response
}

#[derive(Deserialize)]
struct LinkForm {
    answer: String,
    #[serde(default)]
    csrf: String,
}

async fn link_decide(
    State(web): State<Shared>,
    Path(token): Path<String>,
    headers: HeaderMap,
    Form(form): Form<LinkForm>,
) -> Response {
    let question = match web.console.open_link(&token).await {
        Ok(question) => question,
        Err(e) => return web.message(refused_status(&e), "Link not valid", &e.to_string(), None),
    };
    // A link answered already says so, whatever the form carries: nothing changes either way.
    if let Ok(Some(earlier)) = web.console.decision(&question.run_id, &question.call_id).await {
        let refused = Refused::Answered(format!("{} by {}", earlier.answer.label(), earlier.by));
        return web.message(refused_status(&refused), "Not decided", &refused.to_string(), None);
    }
    let expected = cookie(&headers, LINK_COOKIE).unwrap_or_default();
    if expected.is_empty() || !same_secret(&expected, &form.csrf) {
        let text = "The form's CSRF token does not match; nothing was decided. Open the link again.";
        return web.message(StatusCode::FORBIDDEN, "Forbidden", text, None);
    }
    let Some(answer) = Answer::parse(&form.answer) else {
        return web.message(StatusCode::BAD_REQUEST, "Bad request", "Unknown answer.", None);
    };
    match web.console.decide(question.clone(), answer, "link").await {
        Ok(_) => link_view(&web, &question).await,
        Err(e) => web.message(refused_status(&e), "Not decided", &e.to_string(), None),
    }
}

async fn events(State(web): State<Shared>, headers: HeaderMap) -> Response {
    if web.session(&headers).is_none() {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let changes = web.console.subscribe();
    let stream = futures::stream::unfold(changes, |mut changes| async move {
        match changes.recv().await {
            Ok(()) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                // A browser dispatches no event whose data is empty.
                let event = Event::default().event("changed").data("1");
                Some((Ok::<_, std::convert::Infallible>(event), changes))
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => None,
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_utc_dates() {
        assert_eq!(time_of(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(time_of(1_796_480_400), "2026-12-05 14:20:00 UTC");
    }

    #[test]
    fn cookies_are_read_by_name() {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_static("a=1; codemode_console=abc; b=2"));
        assert_eq!(cookie(&headers, COOKIE).as_deref(), Some("abc"));
        assert_eq!(cookie(&headers, "c"), None);
    }

    #[test]
    fn every_template_renders() {
        let env = templates();
        for name in ["login.html", "pending.html", "runs.html", "history.html", "message.html"] {
            let html = env
                .get_template(name)
                .and_then(|t| t.render(context! { csrf => "x", user => "alice<b>", pending => Vec::<u8>::new() }))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!html.contains("alice<b>"), "escaped in {name}");
        }
    }
}
