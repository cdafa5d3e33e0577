// The guest prelude: evaluated once per context, before any user code, with the engine's natives in `natives`.
// It captures every intrinsic it relies on up front, so a program that rewrites prototypes or globals cannot
// break output capture, request encoding or error reporting. It returns the host-facing hooks and leaves
// nothing of itself reachable from globalThis except the documented guest API.
(function (natives) {
  'use strict';
  const G = globalThis;
  const O = Object;
  const defineProperty = O.defineProperty;
  const freeze = O.freeze;
  const keysOf = O.keys;
  const create = O.create;
  const setPrototypeOf = O.setPrototypeOf;
  const isArray = Array.isArray;
  const stringify = JSON.stringify;
  const parse = JSON.parse;
  const Str = String;
  const ErrorCtor = Error;
  const PromiseCtor = Promise;
  const apply = Reflect.apply;
  const arrayJoin = Array.prototype.join;
  const stringSlice = String.prototype.slice;
  const request = natives.request;
  const cancel = natives.cancel;
  const emit = natives.emit;
  const consoleEmit = natives.console;

  const MAX_DEPTH = 100;
  const SetCtor = Set;
  const setHas = Set.prototype.has;
  const setAdd = Set.prototype.add;
  const setDelete = Set.prototype.delete;
  const hidden = (target, key, value) =>
    defineProperty(target, key, { value, writable: false, enumerable: false, configurable: false });
  const slice = (s, a, b) => apply(stringSlice, s, [a, b]);
  // Lone surrogates become U+FFFD before any text leaves the guest: JSON.stringify escapes them as `\udXXX`, which
  // the host's JSON parser rejects, and a rejected payload must never turn into a silent null.
  const toWellFormed = String.prototype.toWellFormed;
  const wellFormed = (s) => apply(toWellFormed, s, []);
  const join = (parts, sep) => apply(arrayJoin, parts, [sep]);

  // JSON.stringify semantics (toJSON, undefined/functions/symbols dropped, non-finite numbers to null), except that
  // only the offending part of a value is marked: a cycle becomes "[Circular]", a BigInt its decimal string, a value
  // nested too deep "[MaxDepth]", a throwing getter or toJSON "[Unserializable: ...]". The result is built from
  // null-prototype objects and arrays so that no inherited toJSON can run when the engine stringifies it.
  function describeThrown(e) {
    try {
      if (e !== null && typeof e === 'object' && typeof e.message === 'string') return wellFormed(e.message);
      return wellFormed(Str(e));
    } catch (_) {
      return 'unknown error';
    }
  }
  function sanitize(value, key, seen, depth) {
    if (value !== null && (typeof value === 'object' || typeof value === 'bigint')) {
      let toJSON;
      try {
        toJSON = value.toJSON;
      } catch (e) {
        if (e === TOO_LONG) throw e;
        return '[Unserializable: ' + describeThrown(e) + ']';
      }
      if (typeof toJSON === 'function') {
        try {
          value = apply(toJSON, value, [key]);
        } catch (e) {
        if (e === TOO_LONG) throw e;
          return '[Unserializable: ' + describeThrown(e) + ']';
        }
      }
    }
    switch (typeof value) {
      case 'string':
        if (value.length > longest) longest = value.length;
        // Boa's JSON.stringify needs about 20 bytes per character; strings this long never reach it: a request
        // fails (before anything is dispatched), a final value keeps a prefix.
        if (value.length > STRING_CAP) {
          if (rejectLong) throw TOO_LONG;
          return wellFormed(slice(value, 0, STRING_CAP) + '…');
        }
        return wellFormed(value);
      case 'boolean':
        return value;
      case 'number':
        return value === value && value !== Infinity && value !== -Infinity ? value : null;
      case 'bigint':
        return Str(value);
      case 'undefined':
      case 'function':
      case 'symbol':
        return undefined;
    }
    if (value === null) return null;
    if (value instanceof Number || value instanceof Boolean || value instanceof String) return value.valueOf();
    if (typeof BigInt === 'function' && value instanceof BigInt) return Str(value.valueOf());
    if (value instanceof PromiseCtor) return '[Unawaited Promise: await it before returning]';
    if (depth >= MAX_DEPTH) return '[MaxDepth]';
    if (apply(setHas, seen, [value])) return '[Circular]';
    apply(setAdd, seen, [value]);
    let out;
    try {
      if (isArray(value)) {
        out = [];
        setPrototypeOf(out, null);
        const n = value.length;
        for (let i = 0; i < n; i++) {
          let item;
          try {
            item = sanitize(value[i], Str(i), seen, depth + 1);
          } catch (e) {
        if (e === TOO_LONG) throw e;
            item = '[Unserializable: ' + describeThrown(e) + ']';
          }
          out[i] = item === undefined ? null : item;
        }
      } else {
        out = create(null);
        if (value instanceof ErrorCtor) {
          out.name = sanitize(value.name, 'name', seen, depth + 1);
          out.message = sanitize(value.message, 'message', seen, depth + 1);
          if (value.code !== undefined) out.code = sanitize(value.code, 'code', seen, depth + 1);
        }
        const keys = keysOf(value);
        for (let i = 0; i < keys.length; i++) {
          const k = keys[i];
          let item;
          try {
            item = sanitize(value[k], k, seen, depth + 1);
          } catch (e) {
        if (e === TOO_LONG) throw e;
            item = '[Unserializable: ' + describeThrown(e) + ']';
          }
          if (item !== undefined) out[wellFormed(k)] = item;
        }
      }
    } finally {
      apply(setDelete, seen, [value]);
    }
    return out;
  }
  // The JSON text of a value as the host receives it; `undefined` (and anything JSON drops) becomes null.
  // Longest string the last encode met, and the longest a string may be to cross the bridge whole.
  const STRING_CAP = 1000000;
  const TOO_LONG = {};
  let longest = 0;
  let rejectLong = false;
  function encode(value, forRequest) {
    longest = 0;
    rejectLong = forRequest === true;
    let clean;
    try {
      clean = sanitize(value, '', new SetCtor(), 0);
    } catch (e) {
      if (e === TOO_LONG) {
        throw new RangeError(
          'code mode request arguments contain a string of ' + longest + ' characters; the limit is ' + STRING_CAP +
            ' characters per string. Pass smaller arguments.',
        );
      }
      // Only a value whose very shape cannot be read (a Proxy whose traps throw) gets here.
      clean = '[Unserializable: ' + wellFormed(describeThrown(e)) + ']';
    }
    return clean === undefined ? 'null' : stringify(clean);
  }

  // Console: bounded, depth-limited rendering of each argument.
  const PER_STRING = 512;
  const PER_MESSAGE = 4096;
  function render(value, depth, budget) {
    if (--budget.nodes < 0) return '…';
    switch (typeof value) {
      case 'string':
        return depth === 0 ? value : stringify(value.length > PER_STRING ? slice(value, 0, PER_STRING) + '…' : value);
      case 'number':
      case 'boolean':
      case 'undefined':
        return Str(value);
      case 'bigint':
        return Str(value) + 'n';
      case 'symbol':
        return 'Symbol()';
      case 'function':
        return '[Function]';
    }
    if (value === null) return 'null';
    try {
      if (value instanceof ErrorCtor) return Str(value.name) + ': ' + Str(value.message);
      if (value instanceof PromiseCtor) return 'Promise {}';
      if (depth >= 4) return isArray(value) ? '[Array]' : '[Object]';
      const parts = [];
      if (isArray(value)) {
        const n = value.length < 50 ? value.length : 50;
        for (let i = 0; i < n; i++) parts[parts.length] = render(value[i], depth + 1, budget);
        if (value.length > 50) parts[parts.length] = '… ' + (value.length - 50) + ' more';
        return '[' + join(parts, ', ') + ']';
      }
      const keys = keysOf(value);
      const n = keys.length < 50 ? keys.length : 50;
      for (let i = 0; i < n; i++) parts[parts.length] = keys[i] + ': ' + render(value[keys[i]], depth + 1, budget);
      if (keys.length > 50) parts[parts.length] = '… ' + (keys.length - 50) + ' more';
      return '{' + join(parts, ', ') + '}';
    } catch (e) {
      return '[Unrenderable: ' + describeThrown(e) + ']';
    }
  }
  function logWith(prefix) {
    return function (...args) {
      const budget = { nodes: 100 };
      const parts = [];
      for (let i = 0; i < args.length; i++) parts[parts.length] = render(args[i], 0, budget);
      let line = prefix + join(parts, ' ');
      if (line.length > PER_MESSAGE) line = slice(line, 0, PER_MESSAGE) + '…';
      consoleEmit(line);
    };
  }
  const consoleObject = create(null);
  hidden(consoleObject, 'log', logWith(''));
  hidden(consoleObject, 'info', logWith(''));
  hidden(consoleObject, 'debug', logWith(''));
  hidden(consoleObject, 'warn', logWith('[warn] '));
  hidden(consoleObject, 'error', logWith('[error] '));
  freeze(consoleObject);

  // Bridge requests. A rejected settlement arrives as {code, message} and becomes an Error raised at the await.
  function toError(reason) {
    const err = new ErrorCtor(reason && typeof reason.message === 'string' ? reason.message : Str(reason));
    if (reason && typeof reason.code === 'string') err.code = reason.code;
    err.effectStatus = 'unknown';
    return err;
  }
  async function bridge(method, payload) {
    let promise;
    try {
      promise = request(method, encode(payload, true));
    } catch (e) {
      throw toError(e);
    }
    try {
      return await promise;
    } catch (e) {
      throw toError(e);
    }
  }
  const callTool = (tool, args) => bridge('callValue', { tool, args: args === undefined ? {} : args });

  function makeHandle(meta) {
    const handle = async function (args) {
      return callTool(meta.callableName, args);
    };
    for (const k of keysOf(meta)) hidden(handle, k, meta[k]);
    hidden(handle, 'describe', () => bridge('describe', { tool: meta.callableName }));
    hidden(handle, 'toJSON', () => meta);
    return freeze(handle);
  }
  const catalog = create(null);
  hidden(catalog, 'search', async (query, options) => {
    const limit = options && options.limit !== undefined ? options.limit : null;
    const found = await bridge('search', { query: Str(query), limit });
    return freeze(found.map(makeHandle));
  });
  hidden(catalog, 'all', async () => freeze((await bridge('search', { all: true })).map(makeHandle)));
  hidden(catalog, 'describe', (name) => bridge('describe', { tool: Str(name) }));
  freeze(catalog);

  // Timers go through the host so they survive suspension; the timer id is the bridge request id.
  function setTimeoutImpl(callback, delay, ...args) {
    let ms = Number(delay);
    ms = ms === ms && ms !== Infinity && ms !== -Infinity && ms > 0 ? Math.floor(ms) : 0;
    const promise = request('sleep', encode({ ms }));
    const id = natives.lastRequestId();
    promise.then(
      () => {
        if (typeof callback === 'function') apply(callback, undefined, args);
      },
      () => {},
    );
    return id;
  }
  function clearTimeoutImpl(id) {
    if (typeof id === 'number') cancel(id);
  }

  // Installs the run's globals; called once, right before the user's program.
  function install(globalsJson) {
    const globals = parse(globalsJson);
    for (const name of globals.tools) {
      const fn = async function (args) {
        return callTool(name, args);
      };
      hidden(fn, 'name', name);
      hidden(G, name, fn);
    }
    const mcp = create(null);
    for (const ns of globals.mcp) {
      const server = create(null);
      for (const [js, tool] of ns.tools) {
        hidden(server, js, async (args) =>
          bridge('namespace', { server: ns.server, tool, args: args === undefined ? {} : args }),
        );
      }
      const op = (name) => async (args) => bridge('namespace', { server: ns.server, op: name, args: args === undefined ? {} : args });
      const resources = create(null);
      hidden(resources, 'list', op('resources.list'));
      hidden(resources, 'read', op('resources.read'));
      const prompts = create(null);
      hidden(prompts, 'list', op('prompts.list'));
      hidden(prompts, 'get', op('prompts.get'));
      hidden(server, 'resources', freeze(resources));
      hidden(server, 'prompts', freeze(prompts));
      hidden(server, '$api', (tool, options) =>
        bridge('api', { op: 'mcpApi', server: ns.server, tool: tool === undefined ? null : Str(tool), schema: !!(options && options.schema) }),
      );
      hidden(mcp, ns.global, freeze(server));
    }
    hidden(G, 'MCP', freeze(mcp));
    hidden(G, 'namespaces', freeze(create(null)));
    const files = create(null);
    for (const [path, content] of globals.apiFiles) files[path] = content;
    const api = create(null);
    hidden(api, 'list', async (prefix) => {
      const p = prefix === undefined ? '' : Str(prefix);
      const local = [];
      for (const path of keysOf(files)) if (slice(path, 0, p.length) === p) local[local.length] = { path, bytes: files[path].length };
      const remote = await bridge('api', { op: 'list', path: p });
      return freeze(local.concat(remote));
    });
    hidden(api, 'read', async (path) => {
      const p = Str(path);
      if (files[p] !== undefined) return files[p];
      return bridge('api', { op: 'read', path: p });
    });
    hidden(G, 'API', freeze(api));
  }

  hidden(G, 'console', consoleObject);
  hidden(G, 'catalog', catalog);
  hidden(G, 'text', (value) => {
    emit('text', typeof value === 'string' ? value : encode(value));
  });
  hidden(G, 'json', (value) => {
    emit('json', encode(value));
  });
  hidden(G, 'store', (key, value) => bridge('store', { key: Str(key), value }));
  hidden(G, 'load', (key) => bridge('load', { key: Str(key) }));
  hidden(G, 'yield_control', (reason) => bridge('yield', { reason: reason === undefined ? null : Str(reason) }));
  const results = create(null);
  hidden(results, 'load', (id) => bridge('resultLoad', { id: Str(id) }));
  hidden(G, 'results', freeze(results));
  hidden(G, 'setTimeout', setTimeoutImpl);
  hidden(G, 'clearTimeout', clearTimeoutImpl);

  // Web platform pieces model code expects and Boa lacks: DOMException, TextEncoder/TextDecoder (UTF-8 only, as
  // in browsers), atob/btoa (forgiving base64) and structuredClone. Plain JavaScript over intrinsics captured here,
  // so a program that rewrites prototypes breaks only its own calls, never these.
  const TypeErrorCtor = TypeError;
  const RangeErrorCtor = RangeError;
  const U8 = Uint8Array;
  const MapCtor = Map;
  const SetCtor2 = Set;
  const DateCtor = Date;
  const RegExpCtor = RegExp;
  const getPrototypeOf = O.getPrototypeOf;
  const getOwnDescriptor = O.getOwnPropertyDescriptor;
  const fromCharCode = Str.fromCharCode;
  const charCodeAt = Str.prototype.charCodeAt;
  const arrayPush = Array.prototype.push;
  const getter = (proto, key) => getOwnDescriptor(proto, key).get;
  const codeAt = (s, i) => apply(charCodeAt, s, [i]);
  const TypedArrayProto = getPrototypeOf(Int8Array).prototype;
  const typedArrayTag = getter(TypedArrayProto, Symbol.toStringTag);
  const typedArrayBuffer = getter(TypedArrayProto, 'buffer');
  const typedArrayOffset = getter(TypedArrayProto, 'byteOffset');
  const typedArrayLength = getter(TypedArrayProto, 'length');
  const typedArrayByteLength = getter(TypedArrayProto, 'byteLength');
  const bufferByteLength = getter(ArrayBuffer.prototype, 'byteLength');
  const bufferSlice = ArrayBuffer.prototype.slice;
  const sharedByteLength = typeof SharedArrayBuffer === 'function' ? getter(SharedArrayBuffer.prototype, 'byteLength') : null;
  const viewBuffer = getter(DataView.prototype, 'buffer');
  const viewOffset = getter(DataView.prototype, 'byteOffset');
  const viewLength = getter(DataView.prototype, 'byteLength');
  const DataViewCtor = DataView;
  const mapSize = getter(MapCtor.prototype, 'size');
  const mapGet = MapCtor.prototype.get;
  const mapSet = MapCtor.prototype.set;
  const mapHas = MapCtor.prototype.has;
  const mapForEach = MapCtor.prototype.forEach;
  const setSize = getter(SetCtor2.prototype, 'size');
  const setForEach = SetCtor2.prototype.forEach;
  const dateGetTime = DateCtor.prototype.getTime;
  const regexpSource = getter(RegExpCtor.prototype, 'source');
  const regexpFlags = getter(RegExpCtor.prototype, 'flags');
  const weakMapHas = WeakMap.prototype.has;
  const weakSetHas = WeakSet.prototype.has;
  const typedArrays = create(null);
  for (const C of [Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array, Uint32Array,
    Float32Array, Float64Array, BigInt64Array, BigUint64Array]) typedArrays[C.name] = C;
  if (typeof Float16Array === 'function') typedArrays.Float16Array = Float16Array;
  const wrappers = [
    [Boolean.prototype.valueOf, Boolean],
    [Number.prototype.valueOf, Number],
    [Str.prototype.valueOf, Str],
    [BigInt.prototype.valueOf, BigInt],
  ];
  const errorCtors = { Error, EvalError, RangeError, ReferenceError, SyntaxError, TypeError, URIError };
  // Calls `f` with `self` as `this`; whether it threw tells an object's internal slots apart from look-alikes.
  const brand = (f, self) => {
    try {
      apply(f, self, []);
      return true;
    } catch (_) {
      return false;
    }
  };
  const defineData = (target, key, value) =>
    defineProperty(target, key, { value, writable: true, enumerable: true, configurable: true });
  const joinChunks = (units) => {
    // fromCharCode over bounded chunks: one call per code unit would be slow, one call for all could exhaust
    // the argument limit.
    const parts = [];
    for (let i = 0; i < units.length; i += 8192) parts[parts.length] = apply(fromCharCode, null, apply(Array.prototype.slice, units, [i, i + 8192]));
    return join(parts, '');
  };

  const DOM_CODES = { IndexSizeError: 1, HierarchyRequestError: 3, WrongDocumentError: 4, InvalidCharacterError: 5,
    NoModificationAllowedError: 7, NotFoundError: 8, NotSupportedError: 9, InvalidStateError: 11, SyntaxError: 12,
    InvalidModificationError: 13, NamespaceError: 14, InvalidAccessError: 15, TypeMismatchError: 17,
    SecurityError: 18, NetworkError: 19, AbortError: 20, URLMismatchError: 21, QuotaExceededError: 22,
    TimeoutError: 23, InvalidNodeTypeError: 24, DataCloneError: 25 };
  class DOMException extends ErrorCtor {
    constructor(message, name) {
      super(message === undefined ? '' : Str(message));
      const n = name === undefined ? 'Error' : Str(name);
      defineProperty(this, 'name', { value: n, writable: true, enumerable: false, configurable: true });
      defineProperty(this, 'code', { value: DOM_CODES[n] || 0, writable: false, enumerable: false, configurable: true });
    }
  }
  const domError = (message, name) => new DOMException(message, name);

  // UTF-8 encoding of a string; a lone surrogate becomes U+FFFD, as in WHATWG "USVString" conversion.
  function utf8Length(s) {
    let bytes = 0;
    const n = s.length;
    for (let i = 0; i < n; i++) {
      const c = codeAt(s, i);
      if (c < 0x80) bytes += 1;
      else if (c < 0x800) bytes += 2;
      else if (c >= 0xd800 && c <= 0xdbff && i + 1 < n && codeAt(s, i + 1) >= 0xdc00 && codeAt(s, i + 1) <= 0xdfff) {
        bytes += 4;
        i++;
      } else bytes += 3;
    }
    return bytes;
  }
  // Writes the UTF-8 of `s` into `out` until `limit` bytes; returns [units read, bytes written].
  function utf8Write(s, out, limit) {
    const n = s.length;
    let j = 0;
    let i = 0;
    for (; i < n; i++) {
      let c = codeAt(s, i);
      if (c < 0x80) {
        if (j + 1 > limit) break;
        out[j++] = c;
      } else if (c < 0x800) {
        if (j + 2 > limit) break;
        out[j++] = 0xc0 | (c >> 6);
        out[j++] = 0x80 | (c & 63);
      } else {
        if (c >= 0xd800 && c <= 0xdfff) {
          const d = i + 1 < n ? codeAt(s, i + 1) : 0;
          if (c <= 0xdbff && d >= 0xdc00 && d <= 0xdfff) {
            if (j + 4 > limit) break;
            const cp = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
            out[j++] = 0xf0 | (cp >> 18);
            out[j++] = 0x80 | ((cp >> 12) & 63);
            out[j++] = 0x80 | ((cp >> 6) & 63);
            out[j++] = 0x80 | (cp & 63);
            i++;
            continue;
          }
          c = 0xfffd;
        }
        if (j + 3 > limit) break;
        out[j++] = 0xe0 | (c >> 12);
        out[j++] = 0x80 | ((c >> 6) & 63);
        out[j++] = 0x80 | (c & 63);
      }
    }
    return [i, j];
  }
  class TextEncoder {
    get encoding() {
      return 'utf-8';
    }
    encode(input) {
      const s = input === undefined ? '' : Str(input);
      const out = new U8(utf8Length(s));
      utf8Write(s, out, out.length);
      return out;
    }
    encodeInto(source, destination) {
      if (brand(typedArrayTag, destination) === false || apply(typedArrayTag, destination, []) !== 'Uint8Array') {
        throw new TypeErrorCtor("Failed to execute 'encodeInto' on 'TextEncoder': parameter 2 is not of type 'Uint8Array'.");
      }
      const [read, written] = utf8Write(Str(source), destination, apply(typedArrayLength, destination, []));
      return { read, written };
    }
  }

  const UTF8_LABELS = ['unicode-1-1-utf-8', 'unicode11utf8', 'unicode20utf8', 'utf-8', 'utf8', 'x-unicode20utf8'];
  // The bytes of an ArrayBuffer, SharedArrayBuffer or view, without copying.
  function bytesOf(input, what) {
    if (input === undefined) return new U8(0);
    if (brand(typedArrayTag, input) && apply(typedArrayTag, input, []) !== undefined) {
      return new U8(apply(typedArrayBuffer, input, []), apply(typedArrayOffset, input, []),
        apply(typedArrayByteLength, input, []));
    }
    if (brand(viewLength, input)) {
      return new U8(apply(viewBuffer, input, []), apply(viewOffset, input, []), apply(viewLength, input, []));
    }
    if (brand(bufferByteLength, input) || (sharedByteLength !== null && brand(sharedByteLength, input))) return new U8(input);
    throw new TypeErrorCtor(what + ": The provided value is not of type '(ArrayBuffer or ArrayBufferView)'.");
  }
  class TextDecoder {
    #fatal;
    #ignoreBOM;
    #streaming = false;
    #bomSeen = false;
    #codePoint = 0;
    #needed = 0;
    #seen = 0;
    #lower = 0x80;
    #upper = 0xbf;
    constructor(label, options) {
      const l = label === undefined ? 'utf-8' : apply(Str.prototype.toLowerCase, apply(Str.prototype.trim, Str(label), []), []);
      if (UTF8_LABELS.indexOf(l) < 0) {
        throw new RangeErrorCtor("Failed to construct 'TextDecoder': The encoding label provided ('" + Str(label) +
          "') is invalid or not supported; code mode decodes UTF-8 only.");
      }
      this.#fatal = !!(options && options.fatal);
      this.#ignoreBOM = !!(options && options.ignoreBOM);
    }
    get encoding() {
      return 'utf-8';
    }
    get fatal() {
      return this.#fatal;
    }
    get ignoreBOM() {
      return this.#ignoreBOM;
    }
    // The WHATWG UTF-8 decoder, byte by byte, with its state kept across `stream: true` calls.
    decode(input, options) {
      const bytes = bytesOf(input, "Failed to execute 'decode' on 'TextDecoder'");
      const stream = !!(options && options.stream);
      if (!this.#streaming) {
        this.#bomSeen = false;
        this.#codePoint = this.#needed = this.#seen = 0;
        this.#lower = 0x80;
        this.#upper = 0xbf;
      }
      this.#streaming = stream;
      const units = [];
      const fatal = this.#fatal;
      const bad = () => {
        if (fatal) {
          this.#codePoint = this.#needed = this.#seen = 0;
          this.#streaming = false;
          throw new TypeErrorCtor("Failed to execute 'decode' on 'TextDecoder': The encoded data was not valid.");
        }
        units[units.length] = 0xfffd;
      };
      const n = bytes.length;
      let cp = this.#codePoint, needed = this.#needed, seen = this.#seen, lower = this.#lower, upper = this.#upper;
      for (let i = 0; i < n; i++) {
        const b = bytes[i];
        if (needed === 0) {
          if (b < 0x80) units[units.length] = b;
          else if (b >= 0xc2 && b <= 0xdf) {
            needed = 1;
            cp = b & 0x1f;
          } else if (b >= 0xe0 && b <= 0xef) {
            if (b === 0xe0) lower = 0xa0;
            if (b === 0xed) upper = 0x9f;
            needed = 2;
            cp = b & 0xf;
          } else if (b >= 0xf0 && b <= 0xf4) {
            if (b === 0xf0) lower = 0x90;
            if (b === 0xf4) upper = 0x8f;
            needed = 3;
            cp = b & 0x7;
          } else bad();
          continue;
        }
        if (b < lower || b > upper) {
          cp = needed = seen = 0;
          lower = 0x80;
          upper = 0xbf;
          i--;
          bad();
          continue;
        }
        lower = 0x80;
        upper = 0xbf;
        cp = (cp << 6) | (b & 0x3f);
        if (++seen !== needed) continue;
        if (cp > 0xffff) {
          units[units.length] = 0xd800 + ((cp - 0x10000) >> 10);
          units[units.length] = 0xdc00 + ((cp - 0x10000) & 0x3ff);
        } else units[units.length] = cp;
        cp = needed = seen = 0;
      }
      if (!stream && needed !== 0) {
        cp = needed = seen = 0;
        lower = 0x80;
        upper = 0xbf;
        bad();
      }
      this.#codePoint = cp;
      this.#needed = needed;
      this.#seen = seen;
      this.#lower = lower;
      this.#upper = upper;
      let start = 0;
      if (!this.#bomSeen && units.length > 0) {
        this.#bomSeen = true;
        if (!this.#ignoreBOM && units[0] === 0xfeff) start = 1;
      }
      return joinChunks(start === 0 ? units : apply(Array.prototype.slice, units, [1]));
    }
  }

  // Forgiving base64, exactly as the HTML standard defines atob and btoa.
  const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
  const B64_INDEX = create(null);
  for (let i = 0; i < 64; i++) B64_INDEX[codeAt(B64, i)] = i;
  function requireArgument(count, what) {
    if (count === 0) throw new TypeErrorCtor("Failed to execute '" + what + "': 1 argument required, but only 0 present.");
  }
  function btoa(data) {
    requireArgument(arguments.length, 'btoa');
    const s = Str(data);
    const n = s.length;
    const out = [];
    for (let i = 0; i < n; i += 3) {
      const a = codeAt(s, i);
      const b = i + 1 < n ? codeAt(s, i + 1) : 0;
      const c = i + 2 < n ? codeAt(s, i + 2) : 0;
      if (a > 255 || b > 255 || c > 255) {
        throw domError("Failed to execute 'btoa': The string to be encoded contains characters outside of the Latin1 range.", 'InvalidCharacterError');
      }
      const triple = (a << 16) | (b << 8) | c;
      out[out.length] = codeAt(B64, triple >> 18);
      out[out.length] = codeAt(B64, (triple >> 12) & 63);
      out[out.length] = i + 1 < n ? codeAt(B64, (triple >> 6) & 63) : 61;
      out[out.length] = i + 2 < n ? codeAt(B64, triple & 63) : 61;
    }
    return joinChunks(out);
  }
  function atob(data) {
    requireArgument(arguments.length, 'atob');
    const s = Str(data);
    const invalid = () =>
      domError("Failed to execute 'atob': The string to be decoded is not correctly encoded.", 'InvalidCharacterError');
    const digits = [];
    for (let i = 0; i < s.length; i++) {
      const c = codeAt(s, i);
      if (c === 0x09 || c === 0x0a || c === 0x0c || c === 0x0d || c === 0x20) continue;
      digits[digits.length] = c;
    }
    let n = digits.length;
    if (n % 4 === 0 && n > 0 && digits[n - 1] === 61) {
      n--;
      if (digits[n - 1] === 61) n--;
    }
    if (n % 4 === 1) throw invalid();
    const out = [];
    let bits = 0;
    let acc = 0;
    for (let i = 0; i < n; i++) {
      const v = B64_INDEX[digits[i]];
      if (v === undefined) throw invalid();
      acc = ((acc << 6) | v) & 0xffffff;
      bits += 6;
      if (bits >= 8) {
        bits -= 8;
        out[out.length] = (acc >> bits) & 0xff;
      }
    }
    return joinChunks(out);
  }

  // structuredClone: the HTML structured-serialize algorithm for what a sandbox can hold (primitives, wrappers,
  // Date, RegExp, Map, Set, ArrayBuffer, typed arrays, DataView, errors, arrays, plain objects, cycles).
  // Functions, symbols, promises and weak collections throw a DataCloneError, as in browsers.
  function cannotClone(what) {
    return domError(what + ' could not be cloned.', 'DataCloneError');
  }
  function cloneBuffer(buffer, memory) {
    if (apply(mapHas, memory, [buffer])) return apply(mapGet, memory, [buffer]);
    const copy = apply(bufferSlice, buffer, [0]);
    apply(mapSet, memory, [buffer, copy]);
    return copy;
  }
  function cloneValue(value, memory) {
    const type = typeof value;
    if (type === 'symbol') throw cannotClone('Symbol()');
    if (type === 'function') throw cannotClone('function ' + Str(value.name === undefined ? '' : value.name) + '()');
    if (value === null || type !== 'object') return value;
    if (apply(mapHas, memory, [value])) return apply(mapGet, memory, [value]);
    for (let i = 0; i < wrappers.length; i++) {
      if (brand(wrappers[i][0], value)) {
        const copy = O(apply(wrappers[i][0], value, []));
        apply(mapSet, memory, [value, copy]);
        return copy;
      }
    }
    if (brand(dateGetTime, value)) {
      const copy = new DateCtor(apply(dateGetTime, value, []));
      apply(mapSet, memory, [value, copy]);
      return copy;
    }
    if (brand(regexpFlags, value) && brand(regexpSource, value)) {
      const copy = new RegExpCtor(apply(regexpSource, value, []), apply(regexpFlags, value, []));
      apply(mapSet, memory, [value, copy]);
      return copy;
    }
    if (brand(bufferByteLength, value)) return cloneBuffer(value, memory);
    if (sharedByteLength !== null && brand(sharedByteLength, value)) throw cannotClone('SharedArrayBuffer');
    const tag = apply(typedArrayTag, value, []);
    if (tag !== undefined) {
      const buffer = cloneBuffer(apply(typedArrayBuffer, value, []), memory);
      const copy = new typedArrays[tag](buffer, apply(typedArrayOffset, value, []), apply(typedArrayLength, value, []));
      apply(mapSet, memory, [value, copy]);
      return copy;
    }
    if (brand(viewLength, value)) {
      const buffer = cloneBuffer(apply(viewBuffer, value, []), memory);
      const copy = new DataViewCtor(buffer, apply(viewOffset, value, []), apply(viewLength, value, []));
      apply(mapSet, memory, [value, copy]);
      return copy;
    }
    if (brand(mapSize, value)) {
      const copy = new MapCtor();
      apply(mapSet, memory, [value, copy]);
      const entries = [];
      apply(mapForEach, value, [(v, k) => apply(arrayPush, entries, [k, v])]);
      for (let i = 0; i < entries.length; i += 2) {
        apply(mapSet, copy, [cloneValue(entries[i], memory), cloneValue(entries[i + 1], memory)]);
      }
      return copy;
    }
    if (brand(setSize, value)) {
      const copy = new SetCtor2();
      apply(mapSet, memory, [value, copy]);
      const items = [];
      apply(setForEach, value, [(v) => apply(arrayPush, items, [v])]);
      for (let i = 0; i < items.length; i++) apply(setAdd, copy, [cloneValue(items[i], memory)]);
      return copy;
    }
    if (value instanceof PromiseCtor) throw cannotClone('#<Promise>');
    try {
      apply(weakMapHas, value, [{}]);
      throw cannotClone('#<WeakMap>');
    } catch (e) {
      if (e instanceof DOMException) throw e;
    }
    try {
      apply(weakSetHas, value, [{}]);
      throw cannotClone('#<WeakSet>');
    } catch (e) {
      if (e instanceof DOMException) throw e;
    }
    let copy;
    if (isArray(value)) {
      copy = [];
      copy.length = value.length;
    } else if (value instanceof ErrorCtor) {
      const name = Str(value.name);
      const Ctor = errorCtors[name] || ErrorCtor;
      copy = new Ctor();
      const message = getOwnDescriptor(value, 'message');
      if (message !== undefined) defineProperty(copy, 'message', { value: Str(value.message), writable: true, configurable: true, enumerable: false });
      if (value.stack !== undefined) defineProperty(copy, 'stack', { value: Str(value.stack), writable: true, configurable: true, enumerable: false });
      apply(mapSet, memory, [value, copy]);
      if (getOwnDescriptor(value, 'cause') !== undefined) {
        defineProperty(copy, 'cause', { value: cloneValue(value.cause, memory), writable: true, configurable: true, enumerable: false });
      }
      return copy;
    } else {
      copy = {};
    }
    apply(mapSet, memory, [value, copy]);
    const keys = keysOf(value);
    for (let i = 0; i < keys.length; i++) defineData(copy, keys[i], cloneValue(value[keys[i]], memory));
    return copy;
  }
  function structuredClone(value, options) {
    requireArgument(arguments.length, 'structuredClone');
    if (options !== undefined && options !== null && options.transfer !== undefined) {
      const transfer = options.transfer;
      if (transfer !== null && typeof transfer === 'object' && transfer.length > 0) {
        throw domError('structuredClone: transferring is not supported in code mode; clone without `transfer`.', 'DataCloneError');
      }
    }
    return cloneValue(value, new MapCtor());
  }

  // Sorting with user code in the loop. Boa sorts with Rust's `sort_by`, which panics (ending the worker) when the
  // order it is given is not total: `arr.sort(() => Math.random() - 0.5)`, a comparator returning NaN or
  // inconsistent results, or objects whose toString changes between calls. Whenever user code would decide an
  // order, sorting runs here instead: a stable merge sort that tolerates any comparator, with each default-order
  // key computed once. Sorts of primitives without a comparator keep the native path.
  const nativeSort = Array.prototype.sort;
  const nativeToSorted = Array.prototype.toSorted;
  const nativeTypedSort = TypedArrayProto.sort;
  const nativeTypedToSorted = TypedArrayProto.toSorted;
  const toObject = O;
  const toLength = (v) => {
    const n = Number(v);
    if (!(n > 0)) return 0;
    return n === Infinity ? 2 ** 53 - 1 : Math.min(Math.floor(n), 2 ** 53 - 1);
  };
  function checkComparator(comparefn, what) {
    if (comparefn !== undefined && typeof comparefn !== 'function') {
      throw new TypeErrorCtor(what + ': The comparison function must be either a function or undefined');
    }
  }
  // A stable merge sort (insertion-sorted runs of 8, then bottom-up merges) in which an element of the right run
  // goes first only when `compare(left, right) > 0`; any comparator, even a random one, terminates. A NaN result
  // counts as "equal", as in SortCompare. The comparator is called directly (this is undefined in strict code).
  function mergeSort(a, compare) {
    const n = a.length;
    for (let lo = 0; lo < n; lo += 8) {
      const hi = lo + 8 < n ? lo + 8 : n;
      for (let i = lo + 1; i < hi; i++) {
        const x = a[i];
        let j = i - 1;
        while (j >= lo && compare(a[j], x) > 0) {
          a[j + 1] = a[j];
          j--;
        }
        a[j + 1] = x;
      }
    }
    let src = a;
    let dst = new Array(n);
    for (let width = 8; width < n; width *= 2) {
      for (let lo = 0; lo < n; lo += 2 * width) {
        const mid = lo + width < n ? lo + width : n;
        const hi = lo + 2 * width < n ? lo + 2 * width : n;
        let i = lo;
        let j = mid;
        let k = lo;
        while (i < mid && j < hi) dst[k++] = compare(src[i], src[j]) > 0 ? src[j++] : src[i++];
        while (i < mid) dst[k++] = src[i++];
        while (j < hi) dst[k++] = src[j++];
      }
      const t = src;
      src = dst;
      dst = t;
    }
    return src;
  }
  const byKey = (a, b) => (a[0] > b[0] ? 1 : 0);
  // Sorts `items` (no holes) as SortCompare would; undefined goes last without reaching the comparator.
  function sortItems(items, comparefn) {
    const defined = [];
    let undefinedCount = 0;
    for (let i = 0; i < items.length; i++) {
      if (items[i] === undefined) undefinedCount++;
      else defined[defined.length] = items[i];
    }
    let sorted;
    if (comparefn === undefined) {
      const keyed = [];
      for (let i = 0; i < defined.length; i++) keyed[i] = [Str(defined[i]), defined[i]];
      sorted = mergeSort(keyed, byKey);
      for (let i = 0; i < sorted.length; i++) sorted[i] = sorted[i][1];
    } else {
      sorted = mergeSort(defined, comparefn);
    }
    for (let i = 0; i < undefinedCount; i++) sorted[sorted.length] = undefined;
    return sorted;
  }
  const hasObjects = (items) => {
    for (let i = 0; i < items.length; i++) {
      const t = typeof items[i];
      if ((t === 'object' && items[i] !== null) || t === 'function') return true;
    }
    return false;
  };
  function sort(comparefn) {
    checkComparator(comparefn, 'Array.prototype.sort');
    const obj = toObject(this);
    const len = toLength(obj.length);
    const items = [];
    for (let k = 0; k < len; k++) if (k in obj) items[items.length] = obj[k];
    if (comparefn === undefined && !hasObjects(items)) return apply(nativeSort, obj, []);
    const sorted = sortItems(items, comparefn);
    let j = 0;
    for (; j < sorted.length; j++) obj[j] = sorted[j];
    for (; j < len; j++) {
      if (!delete obj[j]) throw new TypeErrorCtor('Array.prototype.sort: cannot delete property ' + j);
    }
    return obj;
  }
  function toSorted(comparefn) {
    checkComparator(comparefn, 'Array.prototype.toSorted');
    const obj = toObject(this);
    const len = toLength(obj.length);
    if (len > 2 ** 32 - 1) throw new RangeErrorCtor('Array.prototype.toSorted: invalid array length');
    const items = [];
    for (let k = 0; k < len; k++) items[k] = obj[k];
    if (comparefn === undefined && !hasObjects(items)) return apply(nativeToSorted, obj, []);
    return sortItems(items, comparefn);
  }
  function typedSort(comparefn) {
    checkComparator(comparefn, '%TypedArray%.prototype.sort');
    if (comparefn === undefined) return apply(nativeTypedSort, this, []);
    const tag = apply(typedArrayTag, this, []);
    if (tag === undefined) throw new TypeErrorCtor('%TypedArray%.prototype.sort: this is not a typed array');
    const len = apply(typedArrayLength, this, []);
    const items = [];
    for (let k = 0; k < len; k++) items[k] = this[k];
    const sorted = sortItems(items, comparefn);
    for (let k = 0; k < sorted.length; k++) this[k] = sorted[k];
    return this;
  }
  function typedToSorted(comparefn) {
    checkComparator(comparefn, '%TypedArray%.prototype.toSorted');
    if (comparefn === undefined) return apply(nativeTypedToSorted, this, []);
    const tag = apply(typedArrayTag, this, []);
    if (tag === undefined) throw new TypeErrorCtor('%TypedArray%.prototype.toSorted: this is not a typed array');
    const len = apply(typedArrayLength, this, []);
    const copy = new typedArrays[tag](len);
    for (let k = 0; k < len; k++) copy[k] = this[k];
    return apply(typedSort, copy, [comparefn]);
  }
  const method = (target, name, fn) => {
    defineProperty(fn, 'name', { value: name, writable: false, enumerable: false, configurable: true });
    defineProperty(target, name, { value: fn, writable: true, enumerable: false, configurable: true });
  };
  method(Array.prototype, 'sort', sort);
  method(Array.prototype, 'toSorted', toSorted);
  method(TypedArrayProto, 'sort', typedSort);
  method(TypedArrayProto, 'toSorted', typedToSorted);

  for (const [name, value] of [['DOMException', DOMException], ['TextEncoder', TextEncoder], ['TextDecoder', TextDecoder],
    ['atob', atob], ['btoa', btoa], ['structuredClone', structuredClone]]) {
    defineProperty(G, name, { value, writable: true, enumerable: false, configurable: true });
  }

  // Nothing GC-observable, nothing that compiles strings.
  delete G.WeakRef;
  delete G.FinalizationRegistry;

  // What the host keeps: install the run's globals, encode a final value, describe an uncaught error.
  return {
    install,
    encode,
    describeError(e) {
      try {
        if (e instanceof ErrorCtor) {
          return stringify({
            name: wellFormed(Str(e.name)),
            message: wellFormed(Str(e.message)),
            stack: wellFormed(Str(e.stack === undefined ? '' : e.stack)),
            code: e.code === undefined ? null : wellFormed(Str(e.code)),
          });
        }
        return stringify({ name: 'Uncaught', message: encode(e), stack: '', code: null });
      } catch (_) {
        return stringify({ name: 'Uncaught', message: 'a value that cannot be described', stack: '', code: null });
      }
    },
  };
});
