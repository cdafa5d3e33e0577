//! The gateway's stdio transport: newline-delimited JSON-RPC on stdin/stdout, as rmcp's, with two answers rmcp
//! does not give. A line whose JSON holds a lone-surrogate escape (which Node's `JSON.stringify` emits) is read
//! with each lone escape replaced by U+FFFD; a line that is not JSON at all is answered with a JSON-RPC parse error
//! (-32700) instead of silence, so the client never waits forever.
//!
//! Invariant: every line on stdout is one complete JSON-RPC message, whoever writes it (one lock, one `write_all`).

use std::sync::Arc;

use futures::{Sink, Stream};
use rmcp::RoleServer;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader};
use tokio::sync::Mutex;

/// The longest line read, as rmcp's stdio transport (`DEFAULT_MAX_LINE_LENGTH`): a longer one is answered with a
/// parse error and skipped without being held.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

type Output<W> = Arc<Mutex<W>>;

/// The transport over `read` and `write`: pass it to `ServiceExt::serve`.
pub fn transport<R, W>(
    read: R,
    write: W,
) -> (
    impl Sink<TxJsonRpcMessage<RoleServer>, Error = std::io::Error> + Send + Unpin + 'static,
    impl Stream<Item = RxJsonRpcMessage<RoleServer>> + Send + Unpin + 'static,
)
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let output: Output<W> = Arc::new(Mutex::new(write));
    let sink = futures::sink::unfold(output.clone(), |output, message: TxJsonRpcMessage<RoleServer>| async move {
        let line = serde_json::to_vec(&message).map_err(std::io::Error::other)?;
        write_line(&output, line).await?;
        Ok::<_, std::io::Error>(output)
    });
    let reader = Reader { read: BufReader::new(read), line: Vec::new(), discarding: false, output };
    let stream = futures::stream::unfold(reader, |mut reader| async move {
        let message = reader.next_message().await?;
        Some((message, reader))
    });
    (Box::pin(sink), Box::pin(stream))
}

/// Writes `line` and a newline as one piece, then flushes.
async fn write_line<W: AsyncWrite + Unpin>(output: &Mutex<W>, mut line: Vec<u8>) -> std::io::Result<()> {
    line.push(b'\n');
    let mut output = output.lock().await;
    output.write_all(&line).await?;
    output.flush().await
}

struct Reader<R, W> {
    read: BufReader<R>,
    line: Vec<u8>,
    /// Skipping the rest of a line longer than [`MAX_LINE_BYTES`].
    discarding: bool,
    output: Output<W>,
}

/// What one bounded line read found.
enum Line {
    Complete,
    TooLong,
    End,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Reader<R, W> {
    /// The next message, answering the lines that are none; `None` at the end of input or on a write failure.
    async fn next_message(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let line = self.read_line().await;
            let reply = match line {
                Line::End => return None,
                Line::TooLong => Some(parse_error(&format!("the message is over {MAX_LINE_BYTES} bytes"))),
                Line::Complete => match decode(&self.line) {
                    Decoded::Message(message) => {
                        self.line.clear();
                        return Some(*message);
                    }
                    Decoded::Skip => None,
                    Decoded::Reply(reply) => Some(reply),
                },
            };
            self.line.clear();
            if let Some(reply) = reply {
                let bytes = serde_json::to_vec(&reply).expect("a JSON value always serializes");
                write_line(&self.output, bytes).await.ok()?;
            }
        }
    }

    /// Reads one `\n`-terminated line into `self.line`, never holding more than [`MAX_LINE_BYTES`] of it. Safe to
    /// cancel: a partial line stays in `self.line` for the next call.
    async fn read_line(&mut self) -> Line {
        loop {
            let Ok(available) = self.read.fill_buf().await else { return Line::End };
            if available.is_empty() {
                return Line::End;
            }
            let newline = memchr::memchr(b'\n', available);
            let take = newline.map_or(available.len(), |i| i + 1);
            let mut too_long = false;
            if self.discarding {
                self.discarding = newline.is_none();
            } else if self.line.len() + take > MAX_LINE_BYTES {
                self.line.clear();
                self.discarding = newline.is_none();
                too_long = true;
            } else {
                self.line.extend_from_slice(&available[..take]);
            }
            self.read.consume(take);
            if too_long {
                return Line::TooLong;
            }
            if newline.is_some() && !self.line.is_empty() {
                return Line::Complete;
            }
        }
    }
}

/// What to do with one line.
enum Decoded {
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    /// A blank line, or a notification rmcp would not know: nothing to answer.
    Skip,
    /// An error response to write.
    Reply(Value),
}

fn decode(line: &[u8]) -> Decoded {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(b"\xef\xbb\xbf").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Decoded::Skip;
    }
    let error = match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line) {
        Ok(message) => return Decoded::Message(Box::new(message)),
        Err(error) => error,
    };
    // Only a line that failed is looked at again: the common path parses once.
    let repaired = replace_lone_surrogates(line);
    let line = repaired.as_deref().unwrap_or(line);
    if repaired.is_some()
        && let Ok(message) = serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line)
    {
        return Decoded::Message(Box::new(message));
    }
    let Ok(value) = serde_json::from_slice::<Value>(line) else {
        return Decoded::Reply(parse_error(&error.to_string()));
    };
    // JSON, but no message rmcp knows. A notification (a method without an id) is never answered; rmcp ignores
    // the ones it does not know, so this does too. A request gets an invalid-request error carrying its id.
    let id = value.get("id").filter(|id| id.is_string() || id.is_number()).cloned();
    if value.get("method").is_some() && value.get("id").is_none() {
        return Decoded::Skip;
    }
    Decoded::Reply(json!({
        "jsonrpc": "2.0",
        "id": id.unwrap_or(Value::Null),
        "error": { "code": -32600, "message": format!("Invalid request: {error}") },
    }))
}

/// A JSON-RPC parse error (-32700), which has no id to answer.
fn parse_error(why: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": { "code": -32700, "message": format!("Parse error: {why}; send one JSON-RPC message per line") },
    })
}

/// The line with every `\uXXXX` escape of a lone surrogate, inside a JSON string, replaced by `\ufffd`; `None`
/// when it has none. A high surrogate escape directly followed by a low one is a pair and stays.
pub fn replace_lone_surrogates(line: &[u8]) -> Option<Vec<u8>> {
    let unit_at = |i: usize| -> Option<u16> {
        let escape = line.get(i..i + 6)?;
        if escape[0] != b'\\' || escape[1] != b'u' {
            return None;
        }
        u16::from_str_radix(std::str::from_utf8(&escape[2..]).ok()?, 16).ok()
    };
    let mut out: Option<Vec<u8>> = None;
    let (mut i, mut copied, mut in_string) = (0, 0, false);
    while i < line.len() {
        match line[i] {
            b'"' => {
                in_string = !in_string;
                i += 1;
            }
            b'\\' if in_string => {
                let Some(unit) = unit_at(i) else {
                    i += 2;
                    continue;
                };
                let paired = (0xd800..0xdc00).contains(&unit)
                    && unit_at(i + 6).is_some_and(|low| (0xdc00..0xe000).contains(&low));
                if paired {
                    i += 12;
                } else if (0xd800..0xe000).contains(&unit) {
                    let out = out.get_or_insert_with(|| Vec::with_capacity(line.len()));
                    out.extend_from_slice(&line[copied..i]);
                    out.extend_from_slice(b"\\ufffd");
                    i += 6;
                    copied = i;
                } else {
                    i += 6;
                }
            }
            _ => i += 1,
        }
    }
    let mut out = out?;
    out.extend_from_slice(&line[copied..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::replace_lone_surrogates;

    fn repaired(line: &str) -> Option<String> {
        replace_lone_surrogates(line.as_bytes()).map(|out| String::from_utf8(out).expect("ASCII in, ASCII out"))
    }

    #[test]
    fn only_lone_surrogate_escapes_inside_strings_are_replaced() {
        assert_eq!(repaired(r#"{"a":"\ud800"}"#).as_deref(), Some(r#"{"a":"\ufffd"}"#));
        assert_eq!(repaired(r#"{"a":"x\udc00y\uD83D"}"#).as_deref(), Some(r#"{"a":"x\ufffdy\ufffd"}"#));
        assert_eq!(repaired(r#"{"a":"\ud83d\ude00"}"#), None, "a pair stays");
        assert_eq!(repaired(r#"{"a":"\\ud800"}"#), None, "an escaped backslash, then text");
        assert_eq!(repaired(r#"{"a":"\ud800\ud800\ude00"}"#).as_deref(), Some(r#"{"a":"\ufffd\ud800\ude00"}"#));
        assert_eq!(repaired(r#"{"a\ud800":1}"#).as_deref(), Some(r#"{"a\ufffd":1}"#));
        assert_eq!(repaired(r#"{"a":"é\u0041"}"#), None);
    }
}
