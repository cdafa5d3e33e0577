//! The engine's half of the bridge: the natives the prelude calls, request decoding and numbering, the in-guest
//! queue, the reply inbox budget and replay checks.
//!
//! Invariant: a payload that does not decode into its method's typed call is refused (`invalid_input`) before it
//! gets an id; ids are assigned in creation order from 1; at most `max_pending` requests are released at once, the
//! rest wait in FIFO order; a request re-issued in replay must match the journal's digest or the cell fails.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

use boa_engine::builtins::promise::ResolvingFunctions;
use boa_engine::native_function::NativeFunction;
use boa_engine::object::ObjectInitializer;
use boa_engine::object::builtins::JsPromise;
use boa_engine::{Context, JsNativeError, JsObject, JsResult, JsString, JsValue, js_string};
use codemode_bridge::{
    BridgeCall, BridgeErrorCode, BridgeMethod, BridgeRequest, OutputItem, RequestDigest, SettlementValue,
};
use serde_json::Value;

use super::encode::{self, EncodeError, Intrinsics};
use codemode_vm::protocol::{CellFailure, CellLimits, GuestApiFile, Start};

/// What natives serve the guest on first use, without a bridge request: the metadata of `catalog.all()`'s handles
/// and the declaration files of `API.list` / `API.read`. Shared by every context of a worker.
pub struct LazyGlobals {
    handles: Value,
    files: Vec<GuestApiFile>,
}

impl LazyGlobals {
    pub fn new(handles: Vec<Value>, files: Vec<GuestApiFile>) -> LazyGlobals {
        LazyGlobals { handles: Value::Array(handles), files }
    }
}

/// Where output items go as soon as the guest produces them.
pub type OutputSink = Box<dyn FnMut(OutputItem)>;
/// The bridge state, shared between the engine and its natives through the context's host data.
pub type Shared = Rc<RefCell<BridgeState>>;

/// UTF-16 code units of console output a cell may produce.
const CONSOLE_TOTAL: usize = 16_384;
const CONSOLE_TRUNCATED: &str = "[console output truncated]";

/// Why a request failed, as the guest's `Error` carries it.
pub struct RequestError {
    /// The `code` property, e.g. `tool_error`.
    pub code: BridgeErrorCode,
    /// The message.
    pub message: String,
}

/// Host-side state of one cell's bridge, inside the worker.
pub struct BridgeState {
    sink: OutputSink,
    limits: CellLimits,
    next_id: u32,
    last_id: u32,
    /// Digests recorded by the journal being replayed.
    recorded: Vec<RequestDigest>,
    replaying: bool,
    queue: VecDeque<BridgeRequest>,
    /// Queued requests the guest cancelled: they stay in the queue, taking no slot, so that they leave it in
    /// creation order, reported as made and cancelled at once (the host journals every request id in order).
    withdrawn: std::collections::BTreeSet<u32>,
    released: Vec<BridgeRequest>,
    canceled: Vec<u32>,
    resolvers: HashMap<u32, ResolvingFunctions>,
    in_flight: usize,
    inbox_used: u64,
    output_index: u64,
    skip_output: u64,
    console_units: usize,
    console_truncated: bool,
    sticky: Option<(CellFailure, String)>,
}

impl BridgeState {
    pub fn new(sink: OutputSink) -> Self {
        BridgeState {
            sink,
            limits: CellLimits::default(),
            next_id: 1,
            last_id: 0,
            recorded: Vec::new(),
            replaying: false,
            queue: VecDeque::new(),
            withdrawn: std::collections::BTreeSet::new(),
            released: Vec::new(),
            canceled: Vec::new(),
            resolvers: HashMap::new(),
            in_flight: 0,
            inbox_used: 0,
            output_index: 0,
            skip_output: 0,
            console_units: 0,
            console_truncated: false,
            sticky: None,
        }
    }

    pub fn configure(&mut self, start: &Start) {
        self.limits = start.limits.clone();
        self.recorded = start.journal.requests.clone();
        self.replaying = true;
        self.skip_output = start.skip_output;
    }

    /// Replay is over: requests from now on are new, and output is delivered.
    pub fn finish_replay(&mut self) {
        self.replaying = false;
        // Released requests the journal already knew were reported by the run that recorded them.
        let known = self.recorded.len() as u32;
        self.released.retain(|r| r.id > known);
    }

    pub fn sticky_failure(&mut self) -> Option<(CellFailure, String)> {
        self.sticky.clone()
    }

    pub fn open_count(&self) -> u32 {
        (self.in_flight + self.queue.len() - self.withdrawn.len()) as u32
    }

    pub fn take_released(&mut self) -> (Vec<BridgeRequest>, Vec<u32>) {
        let known = self.recorded.len() as u32;
        let mut released = std::mem::take(&mut self.released);
        released.retain(|r| r.id > known);
        (released, std::mem::take(&mut self.canceled))
    }

    /// Moves queued requests into free in-flight slots, in creation order; a withdrawn one leaves the queue as it
    /// comes to its front, reported as made and cancelled, without a slot.
    pub fn release_queued(&mut self) {
        while let Some(front) = self.queue.front() {
            let withdrawn = self.withdrawn.remove(&front.id);
            if !withdrawn && self.in_flight >= self.limits.max_pending as usize {
                break;
            }
            let request = self.queue.pop_front().expect("the queue has a front");
            if withdrawn {
                self.canceled.push(request.id);
            } else {
                self.in_flight += 1;
            }
            self.released.push(request);
        }
    }

    /// The resolvers of a settled request and the value to settle it with, or `None` for a request the guest has
    /// cancelled since. A reply that overflows the inbox becomes an error the guest can catch.
    #[allow(clippy::type_complexity)]
    pub fn take_resolvers(
        &mut self,
        id: u32,
        value: &SettlementValue,
    ) -> Result<Option<(ResolvingFunctions, Result<Value, RequestError>)>, String> {
        let Some(resolvers) = self.resolvers.remove(&id) else {
            if self.replaying && !self.canceled_before(id) {
                return Err(format!(
                    "code mode replay diverged: the journal settles request {id}, which this run never made"
                ));
            }
            return Ok(None);
        };
        self.in_flight = self.in_flight.saturating_sub(1);
        let payload = match value {
            SettlementValue::Ok { value } => {
                let bytes = codemode_bridge::json_len(value) as u64;
                if self.inbox_used + bytes > self.limits.inbox_bytes {
                    Err(RequestError {
                        code: BridgeErrorCode::InvalidInput,
                        message: codemode_bridge::inbox_overflow_message(
                            bytes,
                            self.limits.inbox_bytes.saturating_sub(self.inbox_used),
                            self.limits.inbox_bytes,
                        ),
                    })
                } else {
                    self.inbox_used += bytes;
                    Ok(value.clone())
                }
            }
            SettlementValue::Err { code, message } => {
                Err(RequestError { code: code.clone(), message: message.clone() })
            }
        };
        Ok(Some((resolvers, payload)))
    }

    fn canceled_before(&self, _id: u32) -> bool {
        // A timer cancelled by the guest is settled by nobody; the journal never holds one. Kept as a hook for
        // hosts that record cancellations.
        false
    }

    fn emit(&mut self, item: OutputItem) {
        let index = self.output_index;
        self.output_index += 1;
        if index >= self.skip_output {
            (self.sink)(item);
        }
    }

    fn console(&mut self, line: String) {
        if self.console_truncated {
            return;
        }
        let units = line.encode_utf16().count();
        if self.console_units + units > CONSOLE_TOTAL {
            self.console_truncated = true;
            self.emit(OutputItem::Text { text: CONSOLE_TRUNCATED.into() });
            return;
        }
        self.console_units += units;
        self.emit(OutputItem::Text { text: line });
    }

    fn create(&mut self, call: BridgeCall) -> Result<u32, String> {
        if let Some((_, message)) = &self.sticky {
            return Err(message.clone());
        }
        let id = self.next_id;
        let method = call.method();
        let request = BridgeRequest { id, call };
        if let Some(recorded) = self.recorded.get(id as usize - 1)
            && *recorded != request.digest()
        {
            {
                let message = format!(
                    "code mode replay diverged at request {id} ({}): the program did not make the same request as \
                     the run it resumes. Programs must be deterministic across a wait.",
                    method.as_str()
                );
                self.sticky = Some((CellFailure::Internal, message.clone()));
                return Err(message);
            }
        }
        // Requests leave in creation order: a new one waits behind those already queued.
        if self.in_flight < self.limits.max_pending as usize && self.queue.is_empty() {
            self.in_flight += 1;
            self.released.push(request);
        } else if self.queue.len() - self.withdrawn.len() < self.limits.max_queued as usize {
            self.queue.push_back(request);
        } else {
            let message = format!(
                "code mode bridge queue limit exceeded ({} ordinary requests queued; {} in-flight slots). Await \
                 smaller batches before creating more tool calls or timers.",
                self.limits.max_queued, self.limits.max_pending
            );
            self.sticky = Some((CellFailure::InvalidInput, message.clone()));
            return Err(message);
        }
        self.next_id += 1;
        self.last_id = id;
        Ok(id)
    }

    fn cancel(&mut self, id: u32) {
        if self.queue.iter().any(|r| r.id == id && r.method() == BridgeMethod::Sleep) {
            // A queued timer is never started: it leaves the queue in its turn, withdrawn.
            if self.resolvers.remove(&id).is_some() {
                self.withdrawn.insert(id);
            }
            return;
        }
        let is_timer = self.released.iter().all(|r| r.id != id || r.method() == BridgeMethod::Sleep);
        if is_timer && self.resolvers.remove(&id).is_some() {
            self.in_flight = self.in_flight.saturating_sub(1);
            self.canceled.push(id);
        }
    }
}

fn shared(context: &Context) -> Shared {
    context.get_data::<Shared>().expect("every engine context carries its bridge state").clone()
}

fn method_from(name: &str) -> Option<BridgeMethod> {
    Some(match name {
        "callValue" => BridgeMethod::CallValue,
        "namespace" => BridgeMethod::Namespace,
        "search" => BridgeMethod::Search,
        "describe" => BridgeMethod::Describe,
        "api" => BridgeMethod::Api,
        "sleep" => BridgeMethod::Sleep,
        "yield" => BridgeMethod::Yield,
        "store" => BridgeMethod::Store,
        "load" => BridgeMethod::Load,
        "resultLoad" => BridgeMethod::ResultLoad,
        _ => return None,
    })
}

fn string_arg(args: &[JsValue], index: usize) -> String {
    args.get(index).and_then(JsValue::as_string).map(|s| s.to_std_string_lossy()).unwrap_or_default()
}

/// `request(method, payload)`: encodes the payload, numbers the request and returns its promise.
fn request(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let method = string_arg(args, 0);
    let method = method_from(&method)
        .ok_or_else(|| JsNativeError::typ().with_message(format!("unknown bridge method {method}")))?;
    let payload = encode_arg(args.get(1), true, context)?;
    let state = shared(context);
    let limit = state.borrow().limits.max_request_bytes;
    let size = codemode_bridge::json_len(&payload);
    if size as u64 > limit {
        return Err(JsNativeError::range()
            .with_message(format!(
                "code mode request arguments are {size} bytes; the limit is {limit} bytes. Pass smaller arguments."
            ))
            .into());
    }
    // The prelude builds every payload, so a malformed one is a prelude bug; it still reaches the guest only as
    // an error it can catch, with code `invalid_input`, and no request is made.
    let call = match BridgeCall::decode(method, payload) {
        Ok(call) => call,
        Err(malformed) => {
            let error = JsNativeError::typ().with_message(malformed.to_string()).into_opaque(context);
            error.create_data_property_or_throw(
                js_string!("code"),
                JsString::from(BridgeErrorCode::InvalidInput.as_str()),
                context,
            )?;
            return Err(boa_engine::JsError::from_opaque(error.into()));
        }
    };
    let id = state.borrow_mut().create(call).map_err(|m| JsNativeError::range().with_message(m))?;
    let (promise, resolvers) = JsPromise::new_pending(context);
    state.borrow_mut().resolvers.insert(id, resolvers);
    Ok(promise.into())
}

/// Encodes a guest value for the host; what JSON drops becomes `null`.
fn encode_arg(value: Option<&JsValue>, for_request: bool, context: &mut Context) -> JsResult<Value> {
    let value = value.cloned().unwrap_or_default();
    let intrinsics = context.get_data::<Rc<Intrinsics>>().expect("every engine context carries its intrinsics").clone();
    match encode::encode(&value, for_request, &intrinsics, context) {
        Ok(value) => Ok(value.unwrap_or(Value::Null)),
        Err(EncodeError::Engine(e)) => Err(e),
        Err(e) => Err(JsNativeError::range().with_message(e.message()).into()),
    }
}

/// `encode(value)`: the JSON text the host would receive for `value`.
fn encode_text(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let value = encode_arg(args.first(), false, context)?;
    Ok(JsValue::from(JsString::from(serde_json::to_string(&value).expect("JSON values always serialize"))))
}

fn last_request_id(_: &JsValue, _: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    Ok(JsValue::new(shared(context).borrow().last_id))
}

fn cancel(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    if let Some(id) = args.first().and_then(JsValue::as_number)
        && id.fract() == 0.0
        && id >= 1.0
        && id <= f64::from(u32::MAX)
    {
        shared(context).borrow_mut().cancel(id as u32);
    }
    Ok(JsValue::undefined())
}

/// `emit(kind, value)`: `text` shows a string as it is and encodes anything else; `json` encodes; `attach` encodes a
/// content block and throws a `TypeError` for anything that is not one `attach` accepts.
fn emit(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let kind = string_arg(args, 0);
    let item = match args.get(1).and_then(JsValue::as_string) {
        Some(text) if kind == "text" => OutputItem::Text { text: text.to_std_string_lossy() },
        _ if kind == "attach" => {
            let block = encode_arg(args.get(1), false, context)?;
            if let Some(problem) = codemode_bridge::attachment_problem(&block) {
                return Err(JsNativeError::typ().with_message(problem).into());
            }
            OutputItem::Attachment { block }
        }
        _ => {
            let value = encode_arg(args.get(1), false, context)?;
            if kind == "json" {
                OutputItem::Json { value }
            } else {
                OutputItem::Text { text: serde_json::to_string(&value).expect("JSON values always serialize") }
            }
        }
    };
    shared(context).borrow_mut().emit(item);
    Ok(JsValue::undefined())
}

fn console(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let line = string_arg(args, 0);
    shared(context).borrow_mut().console(line);
    Ok(JsValue::undefined())
}

fn lazy_globals(context: &Context) -> Option<Rc<LazyGlobals>> {
    context.get_data::<Rc<LazyGlobals>>().cloned()
}

/// An `Error` the guest can catch, with `code: "invalid_input"`, for a request refused before it is made.
fn invalid_input(message: String, context: &mut Context) -> boa_engine::JsError {
    let error = JsNativeError::typ().with_message(message).into_opaque(context);
    // A fresh error object takes new properties.
    let _ = error.create_data_property_or_throw(
        js_string!("code"),
        JsString::from(BridgeErrorCode::InvalidInput.as_str()),
        context,
    );
    boa_engine::JsError::from_opaque(error.into())
}

/// The path checks of `API.list` and `API.read`: no `.` or `..` segment.
fn check_api_path(path: &str, context: &mut Context) -> JsResult<()> {
    if path.split(['/', '\\']).any(|s| s == "." || s == "..") {
        return Err(invalid_input(
            format!("api path \"{path}\" is rejected: '.' and '..' segments are not allowed"),
            context,
        ));
    }
    Ok(())
}

fn file_meta(file: &GuestApiFile) -> serde_json::Map<String, Value> {
    let mut meta = serde_json::Map::new();
    meta.insert("path".into(), Value::String(file.path.clone()));
    meta.insert("description".into(), Value::String(file.description.clone()));
    meta.insert("bytes".into(), Value::from(file.content.len()));
    meta
}

/// `handles()`: the metadata of `catalog.all()`'s handles, as guest values.
fn handles(_: &JsValue, _: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let value = lazy_globals(context).map(|lazy| lazy.handles.clone()).unwrap_or(Value::Array(Vec::new()));
    Ok(crate::natives::json::from_serde(&value, context))
}

/// `apiList(prefix)`: `{ files: [{ path, description, bytes }] }` for the files whose path starts with `prefix`.
fn api_list(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let prefix = string_arg(args, 0);
    check_api_path(&prefix, context)?;
    let prefix = prefix.trim_start_matches('/');
    let files: Vec<Value> = lazy_globals(context)
        .map(|lazy| {
            lazy.files.iter().filter(|f| f.path.starts_with(prefix)).map(|f| Value::Object(file_meta(f))).collect()
        })
        .unwrap_or_default();
    let value = serde_json::json!({ "files": files });
    Ok(crate::natives::json::from_serde(&value, context))
}

/// `apiRead(path)`: `{ path, description, bytes, content }` of one file.
fn api_read(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let path = string_arg(args, 0);
    check_api_path(&path, context)?;
    let lazy = lazy_globals(context);
    let Some(file) = lazy.as_ref().and_then(|lazy| lazy.files.iter().find(|f| f.path == path)) else {
        return Err(invalid_input(
            format!("unknown api path \"{path}\"; API.list() shows the available files"),
            context,
        ));
    };
    let mut value = file_meta(file);
    value.insert("content".into(), Value::String(file.content.clone()));
    Ok(crate::natives::json::from_serde(&Value::Object(value), context))
}

/// `extras()`: compiles the guest extras (see `extras.js`) and returns their factory.
fn extras(_: &JsValue, _: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    super::shared::evaluate(super::shared::Shared::Extras, context)
}

/// `hidden(target, key, value)` and `visible(target, key, value)`: `Object.defineProperty(target, key, { value,
/// writable: false, enumerable, configurable: false })` without building and reading a descriptor object; the
/// prelude defines every guest global and member through them (most of a context's install time was spent in those
/// descriptors). Returns `target`, as `defineProperty` does. Throws a `TypeError` when `target` is not an object
/// or the property cannot be defined.
fn define(args: &[JsValue], enumerable: bool, context: &mut Context) -> JsResult<JsValue> {
    let target = args
        .first()
        .and_then(JsValue::as_object)
        .ok_or_else(|| JsNativeError::typ().with_message("Object.defineProperty called on non-object"))?;
    let key = args.get(1).cloned().unwrap_or_default().to_property_key(context)?;
    let value = args.get(2).cloned().unwrap_or_default();
    let descriptor = boa_engine::property::PropertyDescriptor::builder()
        .value(value)
        .writable(false)
        .enumerable(enumerable)
        .configurable(false);
    target.define_property_or_throw(key, descriptor, context)?;
    Ok(target.into())
}

fn hidden(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    define(args, false, context)
}

fn visible(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    define(args, true, context)
}

/// The natives object handed to the prelude (and never reachable from the guest afterwards).
pub fn natives(context: &mut Context) -> JsObject {
    ObjectInitializer::new(context)
        .function(NativeFunction::from_fn_ptr(request), js_string!("request"), 2)
        .function(NativeFunction::from_fn_ptr(last_request_id), js_string!("lastRequestId"), 0)
        .function(NativeFunction::from_fn_ptr(cancel), js_string!("cancel"), 1)
        .function(NativeFunction::from_fn_ptr(emit), js_string!("emit"), 2)
        .function(NativeFunction::from_fn_ptr(encode_text), js_string!("encode"), 1)
        .function(NativeFunction::from_fn_ptr(console), js_string!("console"), 1)
        .function(NativeFunction::from_fn_ptr(extras), js_string!("extras"), 0)
        .function(NativeFunction::from_fn_ptr(handles), js_string!("handles"), 0)
        .function(NativeFunction::from_fn_ptr(api_list), js_string!("apiList"), 1)
        .function(NativeFunction::from_fn_ptr(api_read), js_string!("apiRead"), 1)
        .function(NativeFunction::from_fn_ptr(hidden), js_string!("hidden"), 3)
        .function(NativeFunction::from_fn_ptr(visible), js_string!("visible"), 3)
        .build()
}
