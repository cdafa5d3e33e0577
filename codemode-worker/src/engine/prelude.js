// The guest prelude: evaluated once per context, before any user code, with the engine's natives in `natives`.
// Every built-in function it calls after user code has started is captured below, before any user code runs, and
// called through `apply`; its loops are indexed, never `for...of` over a guest-reachable iterator. So a program that
// replaces a global or a prototype method cannot change what console output, tool calls, timers, `catalog` or
// `API` do, nor how the host encodes values or describes errors. Not covered: accessors a program defines on
// `Object.prototype` or `Array.prototype` for the keys the prelude assigns, and the language's own protocols,
// which read properties when they run (an `await` of a promise reads its `constructor`, and `then` if that was
// replaced, so rewriting `Promise.prototype` changes the program's own awaits). It returns the
// host-facing hooks and leaves nothing of itself reachable from globalThis except the guest globals listed in
// codemode_catalog::globals (a vm test checks the two agree).
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
  const promiseThen = Promise.prototype.then;
  const NumberCtor = Number;
  const floor = Math.floor;
  const apply = Reflect.apply;
  const arrayJoin = Array.prototype.join;
  const stringSlice = String.prototype.slice;
  const stringSplit = String.prototype.split;
  const request = natives.request;
  const cancel = natives.cancel;
  const emit = natives.emit;
  const consoleEmit = natives.console;

  const setAdd = Set.prototype.add;
  // A read-only, non-enumerable member: `defineProperty(target, key, { value, writable: false, enumerable: false,
  // configurable: false })`, done natively (no descriptor object per property).
  const hidden = natives.hidden;
  // A read-only member a program finds by enumeration (`Object.keys(MCP)`).
  const visible = natives.visible;
  const slice = (s, a, b) => apply(stringSlice, s, [a, b]);
  // Lone surrogates become U+FFFD before any text leaves the guest: JSON.stringify escapes them as `\udXXX`, which
  // the host's JSON parser rejects, and a rejected payload must never turn into a silent null.
  const toWellFormed = String.prototype.toWellFormed;
  const wellFormed = (s) => apply(toWellFormed, s, []);
  const join = (parts, sep) => apply(arrayJoin, parts, [sep]);

  // Values leave the guest through the native encoder (engine/encode.rs): JSON.stringify semantics that mark only
  // the offending part of a value.
  const encode = natives.encode;
  function describeThrown(e) {
    try {
      if (e !== null && typeof e === 'object' && typeof e.message === 'string') return wellFormed(e.message);
      return wellFormed(Str(e));
    } catch (_) {
      return 'unknown error';
    }
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

  // Bridge requests. A request the engine refuses at once (arguments too large, queue full) throws here; a failed
  // one rejects with an Error the engine builds, carrying `code` and `effectStatus`.
  function toError(reason) {
    const err = new ErrorCtor(reason && typeof reason.message === 'string' ? reason.message : Str(reason));
    if (reason && typeof reason.code === 'string') err.code = reason.code;
    err.effectStatus = 'unknown';
    return err;
  }
  function send(method, payload) {
    try {
      return request(method, payload);
    } catch (e) {
      throw toError(e);
    }
  }
  async function bridge(method, payload) {
    return await send(method, payload);
  }
  const callTool = (tool, args) => bridge('callValue', { tool, args: args === undefined ? {} : args });

  // `MCP.<global>` to its server's own name, filled by `install`; MCP handles dispatch through it.
  const mcpServerOf = create(null);
  const mcpApi = (server, tool, options) =>
    bridge('api', { op: 'mcpApi', server, tool: tool === undefined ? null : Str(tool), schema: !!(options && options.schema) });

  // A callable handle: a native tool's handle calls its global; an MCP tool's (`callableName` is its
  // `MCP.<server>.<tool>` path) calls it as that namespace member does, and its `describe()` asks the host for
  // that path, which answers with the server's API header narrowed to the tool (counted in `describeCount`).
  const HANDLE_KEYS = freeze(['callableName', 'toolName', 'label', 'description', 'source', 'input', 'output']);
  function makeHandle(meta) {
    const path = apply(stringSplit, Str(meta.callableName), ['.']);
    const server = meta.source === 'mcp' && path.length === 3 ? mcpServerOf[path[1]] : undefined;
    let handle;
    if (server !== undefined) {
      const tool = Str(meta.toolName);
      handle = async function (args) {
        return await send('namespace', { server, tool, args: args === undefined ? {} : args });
      };
    } else {
      handle = async function (args) {
        return await callTool(meta.callableName, args);
      };
    }
    // As the reference's handle: `name` is the callable name; the metadata (each key, `undefined` when the tool has
    // none) and `describe` are enumerable.
    hidden(handle, 'name', Str(meta.callableName));
    for (let i = 0; i < HANDLE_KEYS.length; i++) visible(handle, HANDLE_KEYS[i], meta[HANDLE_KEYS[i]]);
    if (meta.apiPath !== undefined) visible(handle, 'apiPath', meta.apiPath);
    visible(handle, 'describe', () => bridge('describe', { tool: meta.callableName }));
    hidden(handle, 'toJSON', () => meta);
    return freeze(handle);
  }
  function makeHandles(found) {
    const handles = [];
    for (let i = 0; i < found.length; i++) handles[i] = makeHandle(found[i]);
    return freeze(handles);
  }
  const catalog = create(null);
  hidden(catalog, 'search', async (query, options) => {
    const limit = options && options.limit !== undefined ? options.limit : null;
    return makeHandles(await bridge('search', { query: Str(query), limit }));
  });
  // Discovery, not a search: the handles come with the context's globals, without a request.
  let allHandles = null;
  hidden(catalog, 'all', () => {
    if (allHandles === null) allHandles = makeHandles(natives.handles());
    return allHandles;
  });
  hidden(catalog, 'describe', (name) => bridge('describe', { tool: Str(name) }));
  freeze(catalog);
  // Every tool global's `describe()`, as its handle has; `this` is the global, whose `name` is fixed.
  function describeTool() {
    return bridge('describe', { tool: Str(this.name) });
  }

  // Timers go through the host so they survive suspension; the timer id is the bridge request id.
  function setTimeoutImpl(callback, delay, ...args) {
    let ms = NumberCtor(delay);
    // The host takes whole milliseconds below 2^63; a delay that is not a positive number under that fires at once.
    ms = ms === ms && ms > 0 && ms < 9223372036854775808 ? floor(ms) : 0;
    const promise = request('sleep', { ms });
    const id = natives.lastRequestId();
    apply(promiseThen, promise, [
      () => {
        if (typeof callback === 'function') apply(callback, undefined, args);
      },
      () => {},
    ]);
    return id;
  }
  function clearTimeoutImpl(id) {
    if (typeof id === 'number') cancel(id);
  }

  // Installs the run's globals; called once, right before the user's program.
  function install(globalsJson) {
    const globals = parse(globalsJson);
    // Host namespaces' operations by namespace: `namespaces.<name>` members, and the `nodes` and `skills` globals.
    const spaces = create(null);
    const roots = create(null);
    for (const name of globals.tools) {
      // A real async function, as the guest API promises (its prototype is AsyncFunction.prototype), awaiting
      // the request itself: one promise per call besides the engine's own.
      const fn = async function (args) {
        return await send('callValue', { tool: name, args: args === undefined ? {} : args });
      };
      hidden(fn, 'name', name);
      hidden(fn, 'describe', describeTool);
      const path = apply(stringSplit, name, ['.']);
      if (path.length === 1) {
        hidden(G, name, fn);
      } else if (path[0] === 'namespaces') {
        if (spaces[path[1]] === undefined) spaces[path[1]] = create(null);
        visible(spaces[path[1]], path[2], fn);
      } else {
        if (roots[path[0]] === undefined) roots[path[0]] = create(null);
        visible(roots[path[0]], path[1], fn);
      }
    }
    // Servers and their tools are enumerable, so `Object.keys(MCP)` and `Object.keys(MCP.<server>)` list them;
    // `$api`, `resources` and `prompts` are not tools and stay out of the listing.
    const mcp = create(null);
    for (const ns of globals.mcp) {
      mcpServerOf[ns.global] = ns.server;
      const server = create(null);
      for (const [js, tool] of ns.tools) {
        visible(server, js, async (args) => await send('namespace', { server: ns.server, tool, args: args === undefined ? {} : args }));
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
      hidden(server, '$api', (tool, options) => mcpApi(ns.server, tool, options));
      visible(mcp, ns.global, freeze(server));
    }
    freeze(mcpServerOf);
    hidden(G, 'MCP', freeze(mcp));
    const namespaces = create(null);
    for (const key of keysOf(spaces)) visible(namespaces, key, freeze(spaces[key]));
    hidden(G, 'namespaces', freeze(namespaces));
    for (const key of keysOf(roots)) hidden(G, key, freeze(roots[key]));
    // The declaration files come with the context's globals: listing and reading them makes no request.
    const api = create(null);
    hidden(api, 'list', async (prefix) => natives.apiList(prefix === undefined ? '' : Str(prefix)));
    hidden(api, 'read', async (path) => natives.apiRead(Str(path)));
    hidden(G, 'API', freeze(api));
  }

  hidden(G, 'console', consoleObject);
  hidden(G, 'catalog', catalog);
  hidden(G, 'text', (value) => {
    emit('text', value);
  });
  hidden(G, 'json', (value) => {
    emit('json', value);
  });
  // An MCP content block (image, audio, resource link, embedded resource) for the caller, outside the value.
  hidden(G, 'attach', (block) => {
    emit('attach', block);
  });
  hidden(G, 'store', (key, value) => bridge('store', { key: Str(key), value }));
  hidden(G, 'load', (key) => bridge('load', { key: Str(key) }));
  hidden(G, 'yield_control', (reason) => bridge('yield', { reason: reason === undefined ? null : Str(reason) }));
  const results = create(null);
  hidden(results, 'load', (id) => bridge('resultLoad', { id: Str(id) }));
  hidden(G, 'results', freeze(results));
  hidden(G, 'setTimeout', setTimeoutImpl);
  hidden(G, 'clearTimeout', clearTimeoutImpl);

  // The extras (web platform pieces) are compiled on first use; see extras.js. The comparator-safe sorts are
  // native (src/natives/sort.rs), installed by `natives::install` before this prelude runs.
  let extrasCache = null;
  const extras = () => {
    if (extrasCache === null) extrasCache = natives.extras()({
      ErrorCtor, G, O, PromiseCtor, Str, apply, create, defineProperty, isArray, join, keysOf, setAdd,
    });
    return extrasCache;
  };
  for (const name of ['DOMException', 'TextEncoder', 'TextDecoder', 'atob', 'btoa', 'structuredClone']) {
    defineProperty(G, name, {
      enumerable: false,
      configurable: true,
      get() {
        const value = extras()[name];
        defineProperty(G, name, { value, writable: true, enumerable: false, configurable: true });
        return value;
      },
      set(value) {
        defineProperty(G, name, { value, writable: true, enumerable: false, configurable: true });
      },
    });
  }

  // Nothing GC-observable, nothing that compiles strings.
  delete G.WeakRef;
  delete G.FinalizationRegistry;
  // Boa's waitAsync parks the job loop on a waiter only another agent could notify, spinning a core until the
  // deadline; there is one agent, so it could never settle.
  delete G.Atomics.waitAsync;

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
