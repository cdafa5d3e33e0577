//! Store URLs in messages: [`redact_url`] masks the password of a PostgreSQL connection string in each form
//! tokio-postgres reads, as libpq does: `postgres://user:PASSWORD@host/db`, `postgres://host/db?password=PASSWORD`
//! and `host=h password=PASSWORD`.
//!
//! It reads the text the way tokio-postgres's parser does, so what that parser would send as the password is masked;
//! where the two could differ (an `@` left unencoded in a password, a mistyped scheme or keyword, a text the parser
//! refuses) it masks more, never less. It never fails and never connects.

use std::ops::Range;

/// What a masked password becomes.
pub const PASSWORD_MASK: &str = "***";

/// `url` with every password in it replaced by [`PASSWORD_MASK`], for error messages and logs.
///
/// ```
/// use codemode_store_pg::redact_url;
/// assert_eq!(redact_url("postgres://app:s3cret@db/codemode"), "postgres://app:***@db/codemode");
/// assert_eq!(redact_url("postgres://db/codemode?user=app&password=s3cret"), "postgres://db/codemode?user=app&password=***");
/// assert_eq!(redact_url("host=db user=app password='s3 cret'"), "host=db user=app password='***'");
/// ```
pub fn redact_url(url: &str) -> String {
    // A URL of any scheme (one mistyped as `postgre://` or `mysql://` too) is read as a URL; a text whose `://`
    // comes after a `=` or a space is the keyword form with a URL in a value.
    let scheme = url.find("://").filter(|at| !url[..*at].contains(|c: char| c == '=' || c.is_ascii_whitespace()));
    let spans = match scheme {
        Some(at) => url_passwords(url, at + 3),
        None => keyword_passwords(url),
    };
    let mut out = String::with_capacity(url.len());
    let mut at = 0;
    for span in spans {
        out.push_str(&url[at..span.start]);
        out.push_str(PASSWORD_MASK);
        at = span.end;
    }
    out.push_str(&url[at..]);
    out
}

/// The passwords of the URL form, in order: the one after `user:` before the `@`, and each `password=` parameter.
fn url_passwords(url: &str, start: usize) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    let rest = &url[start..];
    // tokio-postgres ends the user info at the first `@`; an `@` left unencoded in a password puts more before the
    // host, so the user info here runs to the last `@` before the host's end (the first `/` or `?` after it).
    let mut after_user_info = 0;
    if let Some(first) = rest.find('@') {
        let host_end = rest[first..].find(['/', '?']).map_or(rest.len(), |p| first + p);
        let end = rest[..host_end].rfind('@').unwrap_or(first);
        if let Some(colon) = rest[..end].find(':')
            && colon + 1 < end
        {
            spans.push(start + colon + 1..start + end);
        }
        after_user_info = end + 1;
    }
    // Parameters follow the first `?` after the user info, `&`-separated; keys are percent-decoded.
    if let Some(q) = rest[after_user_info..].find('?') {
        let mut at = after_user_info + q + 1;
        for pair in rest[at..].split('&') {
            if let Some((key, value)) = pair.split_once('=')
                && percent_decoded(key).eq_ignore_ascii_case(b"password")
                && !value.is_empty()
            {
                let from = start + at + key.len() + 1;
                spans.push(from..from + value.len());
            }
            at += pair.len() + 1;
        }
    }
    spans
}

/// The passwords of the `keyword=value` form: values are bare (ending at whitespace, `\` escaping the next character)
/// or single-quoted (`\` escaping too). A text that stops parsing is masked from there on.
fn keyword_passwords(text: &str) -> Vec<Range<usize>> {
    let bytes = text.as_bytes();
    let skip_ws = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let mut spans = Vec::new();
    let mut i = skip_ws(0);
    while i < bytes.len() {
        let key_start = i;
        while i < bytes.len() && !bytes[i].is_ascii_whitespace() && bytes[i] != b'=' {
            i += 1;
        }
        let key = &text[key_start..i];
        i = skip_ws(i);
        if bytes.get(i) != Some(&b'=') {
            // Not `keyword = value`: the parser refuses the text, and what follows may be a password.
            let from = skip_ws(key_start + key.len());
            if from < bytes.len() {
                spans.push(from..bytes.len());
            }
            break;
        }
        i = skip_ws(i + 1);
        let quoted = bytes.get(i) == Some(&b'\'');
        let value_start = if quoted { i + 1 } else { i };
        let mut j = value_start;
        while j < bytes.len() {
            match bytes[j] {
                b'\\' => j += 2,
                b'\'' if quoted => break,
                b if !quoted && b.is_ascii_whitespace() => break,
                _ => j += 1,
            }
        }
        let value_end = j.min(bytes.len());
        if key.eq_ignore_ascii_case("password") && value_end > value_start {
            spans.push(value_start..value_end);
        }
        i = skip_ws(if quoted { value_end + 1 } else { value_end }.min(bytes.len()));
    }
    spans
}

/// `text` with `%XX` escapes decoded, as tokio-postgres decodes parameter keys; a `%` not followed by two hex digits
/// stays as it is.
fn percent_decoded(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16).and_then(|d| u8::try_from(d).ok());
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(high), Some(low)) => {
                out.push(high * 16 + low);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_is_masked_in_every_form_and_the_rest_is_kept() {
        for (url, shown) in [
            ("postgres://app:s3cret@db:5432/codemode", "postgres://app:***@db:5432/codemode"),
            ("postgresql://app:s3cret@db/codemode?sslmode=disable", "postgresql://app:***@db/codemode?sslmode=disable"),
            ("postgres://app@db/codemode", "postgres://app@db/codemode"),
            ("postgres://app:p@ss@db/codemode", "postgres://app:***@db/codemode"),
            ("postgres://app:a/b@db/codemode", "postgres://app:***@db/codemode"),
            ("postgres://db/codemode?user=app&password=s3cret", "postgres://db/codemode?user=app&password=***"),
            ("postgres://db/c?password=s3cret&user=app", "postgres://db/c?password=***&user=app"),
            ("postgres://db/c?pass%77ord=s3cret", "postgres://db/c?pass%77ord=***"),
            ("postgres://u:x@db/c?password=y", "postgres://u:***@db/c?password=***"),
            ("host=db user=app password=s3cret dbname=c", "host=db user=app password=*** dbname=c"),
            ("host=db password = s3cret", "host=db password = ***"),
            ("password='s3 cret' host=db", "password='***' host=db"),
            (r"password=s3\ cret host=db", "password=*** host=db"),
            (r"password='it\'s' host=db", "password='***' host=db"),
            ("host=db password='unterminated", "host=db password='***"),
            ("host=db password s3cret", "host=db password ***"),
            ("host=db port=5432", "host=db port=5432"),
            ("host=db PASSWORD=s3cret", "host=db PASSWORD=***"),
            ("host=db password=a://b", "host=db password=***"),
            ("postgre://app:s3cret@db/c", "postgre://app:***@db/c"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn every_password_tokio_postgres_reads_is_masked() {
        for url in [
            "postgres://app:s3cret@db/codemode",
            "postgres://db/codemode?password=s3cret",
            "host=db password=s3cret",
            "host=db password='s3cret'",
            "postgres://app:s3cret@db/codemode?password=s3cret",
        ] {
            let config: tokio_postgres::Config = url.parse().expect("a valid connection string");
            assert_eq!(config.get_password(), Some(b"s3cret".as_slice()), "{url}");
            assert!(!redact_url(url).contains("s3cret"), "{url}");
        }
    }
}
