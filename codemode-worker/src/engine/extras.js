// Guest extras, compiled on first use: the web platform pieces model code expects and Boa lacks (DOMException,
// TextEncoder/TextDecoder (UTF-8 only, as in browsers), atob/btoa (forgiving base64), structuredClone). Parsing
// them costs several milliseconds, so a context only pays for them when a program touches one; returns the pieces
// for the prelude to install. `core` holds what the prelude captured before user code ran; everything else below
// (`TypeError`, `Map`, `Uint8Array`, their prototype methods and getters, ...) is read here, at first use, which is
// after user code ran: a program that replaced one of those before touching an extra changes how the extras
// behave for itself. Nothing the host relies on (output, requests, encoding, error reports) goes through the extras.
(function (core) {
  'use strict';
  const { ErrorCtor, G, O, PromiseCtor, Str, apply, create, defineProperty, isArray, join, keysOf, setAdd } = core;
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

  return { DOMException, TextEncoder, TextDecoder, atob, btoa, structuredClone };
});
