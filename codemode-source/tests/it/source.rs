//! Source checks before a program runs: fixtures with snapshotted outcomes, the reference's shell cases (and
//! ours), module access, TypeScript, the depth guard against hostile nesting, and the line map.
//! These tests never start a worker: `prepare` is pure.

use codemode_source::{MAX_CHAIN, MAX_NESTING, MAX_TREE_DEPTH, Position, SourceErrorKind, prepare};

/// One readable outcome per source: the prepared body, or the refusal with its kind and message.
fn outcome(code: &str) -> String {
    match prepare(code) {
        Ok(p) if p.transformed => format!("ok (transformed)\n{}", p.js),
        Ok(p) if p.js == code => "ok (unchanged)".to_owned(),
        Ok(p) => format!("ok (exports blanked)\n{}", p.js),
        Err(e) => format!("{:?} at {:?}\n{}", e.kind, e.position.map(|p| (p.line, p.column)), e.message),
    }
}

fn kind(code: &str) -> Option<SourceErrorKind> {
    prepare(code).err().map(|e| e.kind)
}

#[test]
fn fixtures() {
    insta::glob!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/source"), "*.{js,ts}", |path| {
        let code = std::fs::read_to_string(path).expect("fixture is readable UTF-8");
        insta::assert_snapshot!(outcome(&code));
    });
}

/// Shell payloads: the reference's cases (its 17 rejections, reconstructed, and its newer suite) and ours.
const SHELL: &[&str] = &[
    "ls -la",
    "git status",
    "#!/bin/sh\necho hi",
    "cat file | grep x",
    "FOO=1 npm test",
    "npm install",
    "cd /tmp && ls",
    "rg -n foo src/",
    "python3 script.py",
    "echo \"hi\" > out.txt",
    "if [ -f x ]; then echo y; fi",
    "for f in *.txt; do echo $f; done",
    "sudo rm -rf /",
    "/usr/bin/env node",
    "curl https://x",
    "ls",
    "pwd",
    // The reference's newer suite.
    "ls -1",
    "ls /var/log",
    "pwd;",
    "pwd; // inspect the workspace",
    "# inspect the workspace\n# then report it\npwd",
    "#!/usr/bin/env bash\nset -euo pipefail\npwd",
    "pwd\nls -la /workspace",
    "pwd;ls -la /workspace",
    "pwd && ls /workspace",
    "pwd||ls /workspace",
    "echo hello",
    "echo listing; ls /workspace/ 2>&1 || echo failed",
    "ls /workspace/ > /tmp/wlist.txt 2>&1; cat /tmp/wlist.txt",
    "/bin/ls /workspace/",
    "/usr/local/bin/python3 script.py",
    "sh -c 'ls /workspace/'",
    "export FOO=bar",
    "env FOO=bar node script.js",
    "NODE_ENV=test npm test",
    "NODE_ENV=test\nnpm test",
    "FOO=bar\r\n  npm test",
    "FOO=bar BAR=baz node --version",
    "GREETING=\"hello world\" npm test",
    "GREETING='hello world' ./gradlew test",
    "EMPTY= npm test",
    r#"A="\\" ls "file" argument"#,
    r#"A="\\" B='a b' ls "file" argument"#,
    "A=\\😀\r\n  ls -1",
    "// inspect the workspace\npwd",
    "/* inspect the workspace */ pwd;",
    "// use a clean environment\nNODE_ENV=test npm test",
    "git status; const note = \"function git\";",
    "ls -1; const metadata = { ls: true };",
    "ls -1; let ls = 7;",
    "pwd; class/**/pwd {}",
    "if [ -d /workspace ]; then pwd; fi",
    "if [[ -d /workspace ]]; then pwd; fi",
    "while test -d /workspace; do pwd; done",
    "for file in /workspace/*; do echo \"$file\"; done",
    "for ((i=0; i<3; i++)); do echo \"$i\"; done",
    "function task { pwd; }",
    "jq . file.json",
    "custom-tool --format=json",
    "some_cli /workspace/file",
    "ls>output",
    "ls>>output",
    "ls 2> error",
    "ls < input",
    "./gradlew test",
    ".\\gradlew.bat test",
    "C:\\workspace\\run.cmd /q",
    "../bin/task --verbose",
    "/opt/homebrew/bin/tool --version",
    "~/bin/task",
    // Ours.
    "git log --oneline | head -5",
    "docker ps -a",
    "kubectl get pods -n default",
    "cargo test -p codemode-worker",
    "make -j4",
    "tar -xzf archive.tar.gz",
    "ssh user@host",
    "npx tsc --noEmit",
    "  \n\tls -la\n",
    "case $x in a) echo a;; esac",
    "until false; do sleep 1; done",
    "find . -name '*.rs' | xargs wc -l",
    "grep\n.call(null, 'x')",
    "apt-get install -y jq",
];

/// Ordinary JavaScript (and `export` sources) that must not be taken for shell.
const NOT_SHELL: &[&str] = &[
    "return 1+1",
    "const files = await list({path: \".\"}); return files",
    "export const x = 1",
    "text(\"hi\")",
    "await read({path:\"a\"})",
    "log = 1",
    "return 7;",
    "return \"test\";",
    "console.log(await read({ path: '/workspace/' }));",
    // The reference's newer suite.
    "",
    "true;",
    "42;",
    "\"ls /workspace\";",
    "return /foo/.test('foo');",
    "Infinity -1; return 42;",
    "eval; return typeof eval;",
    "if (true) { return -1; }",
    "while (false) { return 7; }",
    "for (let i = 0; i < 3; i++) { if (i === 2) { return i; } }",
    "function task() { return 7; } return task();",
    "const value = ;",
    "value || fallback",
    "value | mask",
    "value > limit",
    "/foo/.test('foo')",
    "ls('workspace')",
    "ls .call(null)",
    "ls ?.('workspace')",
    "ls = 7",
    "ls + count",
    "ls -1; function ls() {}",
    "ls -1; function/**/ls() {}",
    "echo `hello`; function echo(parts) { return parts[0]; }",
    "pwd\nfunction pwd() {}",
    "pwd; var { pwd } = { pwd: 7 }; return pwd;",
    "pwd; var [pwd] = [7]; return pwd;",
    "pwd; var { nested: { pwd } } = { nested: { pwd: 7 } }; return pwd;",
    "pwd; for (var pwd of [7]) {} return pwd;",
    "pwd; var other = 1, pwd = 7; return pwd;",
    "pwd; function* pwd() { yield 7; }",
    "pwd; var/**/{ pwd } = { pwd: 7 }; return pwd;",
    "node -version; function/**/node() {}; var version = 1;",
    "ls > limit; function ls() {} var limit = 1;",
    "test instanceof Function; function test() {}",
    "export const answer = 7;",
    "export abstract class Example {}",
    "export = Example;",
    "export async function read() {}",
    "export { answer };",
    "export * from './types';",
    "const result = await exec({ command: \"ls\" }); return result;",
    "// shell documentation: ls /workspace\nreturn 7;",
    "/* typed module */ export interface Result { value: number }",
    // Ours.
    "const ls = await list({ path: \"/\" }); return ls;",
    "let git = 1; git += 1; return git;",
    "find({ name: 'x' })",
    "cat",
    "// ls -la\nreturn await search({ query: 'files' });",
    "const files: string[] = []; return files;",
];

#[test]
fn shell_payloads_are_rejected() {
    let missed: Vec<&str> = SHELL.iter().copied().filter(|s| kind(s) != Some(SourceErrorKind::Shell)).collect();
    assert!(missed.is_empty(), "taken for JavaScript: {missed:#?}");
}

#[test]
fn javascript_is_not_taken_for_shell() {
    let wrong: Vec<&str> = NOT_SHELL.iter().copied().filter(|s| kind(s) == Some(SourceErrorKind::Shell)).collect();
    // `cat` alone is a known command with no arguments: the reference rejects it too.
    assert_eq!(wrong, ["cat"], "taken for shell");
}

/// The shell check's globals are codemode-catalog's list: a program that starts with any guest global or
/// built-in followed by something argument-like (`text -x`, `DOMException /a/`) is JavaScript, not a command.
#[test]
fn programs_starting_with_a_guest_global_are_not_shell() {
    use codemode_catalog::globals::{GUEST_GLOBALS, STANDARD_GLOBALS};
    let wrong: Vec<String> = GUEST_GLOBALS
        .iter()
        .chain(STANDARD_GLOBALS)
        .flat_map(|name| [format!("{name} -x"), format!("{name} /a/")])
        .filter(|code| kind(code) == Some(SourceErrorKind::Shell))
        .collect();
    assert!(wrong.is_empty(), "taken for shell: {wrong:#?}");
    // A name the guest does not have is still checked as a command.
    assert_eq!(kind("nodes -x"), Some(SourceErrorKind::Shell));
}

#[test]
fn shell_message() {
    insta::assert_snapshot!(prepare("git status").unwrap_err().message);
}

#[test]
fn shell_checks_are_linear() {
    // Quotes that never close and a long chain of assignments must not backtrack.
    assert_ne!(kind(&format!("A={}", "\"\"".repeat(22))), Some(SourceErrorKind::Shell));
    assert_ne!(kind(&format!("A=\"{}", "\\\"".repeat(32_000))), Some(SourceErrorKind::Shell));
    assert_eq!(kind(&format!("{}ls -1", "A=x ".repeat(32_000))), Some(SourceErrorKind::Shell));
}

#[test]
fn module_access_is_found_in_the_tree() {
    for code in [
        "import fs from 'fs';",
        "import 'fs';",
        "import * as fs from 'fs';",
        "const m = await import('fs');",
        "import('fs').then(() => 1);",
        "require('fs')",
        "(require)('fs')",
        "((require))('fs')",
        "(0, require)('fs')",
        "(0, (1, require))('fs')",
        "require?.('fs')",
        "(require as any)('fs')",
        "require!('fs')",
        "new require('fs')",
        "return import.meta.url",
        "export * from 'fs'",
        "export { readFile } from 'fs'",
        "export * as fs from 'fs'",
        "import fs = require('fs');",
        "function f() { return require('child_process'); } return f();",
        "const g = async () => (await import('fs')).readFileSync('/etc/passwd');",
    ] {
        let error = prepare(code).expect_err(code);
        assert_eq!(error.kind, SourceErrorKind::ModuleAccess, "{code}: {}", error.message);
        assert_eq!(error.message, "code mode module access is disabled.");
    }
    for code in [
        "return 'import x from \"y\"; require(\"z\")';",
        "// require('fs')\n/* import('fs') */ return 1;",
        "const o = { require: 1, import: 2 }; return o.require + o.import;",
        "return obj.require('fs');",
        "const re = /require\\(/; return re.source;",
        "return `import(${1})`;",
        "import type { Entry } from './types'; const e: Entry = {} as Entry; return e;",
        "import { type Entry } from './types'; return 1 as unknown as Entry;",
        "export type { Entry } from './types'; return 1;",
    ] {
        assert!(prepare(code).is_ok(), "{code}: {:?}", prepare(code).err());
    }
}

#[test]
fn javascript_comes_back_unchanged() {
    let code = "const x = await read({ path: 'a' });\nreturn x?.length ?? 0;";
    let prepared = prepare(code).unwrap();
    assert!(!prepared.transformed);
    assert_eq!(prepared.js, code);
    assert!(prepared.line_map.is_identity());
    assert_eq!(prepared.line_map.original(2, 5), Some(Position { line: 2, column: 5 }));
}

#[test]
fn export_keywords_are_blanked_in_place() {
    let code = "export const x = 1;\nexport { x as y };\nreturn x;";
    let prepared = prepare(code).unwrap();
    assert_eq!(prepared.js, "       const x = 1;\n                  \nreturn x;");
    assert!(prepared.line_map.is_identity());
}

#[test]
fn typescript_is_stripped_without_downleveling() {
    let code = "const xs: number[] = [1, 2];\nconst o = { ...{ a: 1 }, b: xs?.[0] ?? 2 };\n\
                class A { #p = 1; static s = 2; get p(): number { return this.#p; } }\n\
                for await (const x of gen()) {}\nreturn o satisfies object;";
    let prepared = prepare(code).unwrap();
    assert!(prepared.transformed);
    for modern in ["?.", "??", "...", "#p", "static s", "for await", "return o"] {
        assert!(prepared.js.contains(modern), "{modern} missing from:\n{}", prepared.js);
    }
    for typed in ["number", "satisfies"] {
        assert!(!prepared.js.contains(typed), "{typed} left in:\n{}", prepared.js);
    }
}

#[test]
fn typescript_syntax_is_detected() {
    for code in [
        "let x: number = 1;",
        "interface A {}",
        "type T = string;",
        "enum E { A }",
        "const y = 1 as number;",
        "const y = <number>1;",
        "const y = {} satisfies object;",
        "const y = x!;",
        "declare const d: number;",
        "function f<T>(x) { return x; }",
        "const g = f<number>;",
        "function f(x?) {}",
        "class C { private x = 1 }",
        "class C { constructor(public x) {} }",
        "class C { declare x }",
        "class C { x!: number }",
        "class C { readonly x = 1 }",
        "abstract class C {}",
        "class C implements I {}",
        "function f(this: Window) {}",
        "let v!: number;",
        "namespace N {}",
        "function over(a): void;\nfunction over(a) {}",
    ] {
        let prepared = prepare(code).unwrap_or_else(|e| panic!("{code}: {}", e.message));
        assert!(prepared.transformed, "{code} was not transformed");
    }
    for code in ["let x = 1;", "class C { #x = 1; static y; }", "const f = (a, b = 2, ...c) => a;", "a < b > c;"] {
        assert!(!prepare(code).unwrap().transformed, "{code} was transformed");
    }
}

#[test]
fn line_map_points_into_the_users_source() {
    let code = "interface A {\n  x: number;\n}\n\ntype B = A;\nconst a: B = { x: 1 };\n\n\nthrow new Error('boom');";
    let prepared = prepare(code).unwrap();
    let (line, column) = prepared
        .js
        .lines()
        .enumerate()
        .find_map(|(i, l)| l.find("throw").map(|c| (i as u32 + 1, c as u32 + 1)))
        .expect("the throw survives");
    assert_eq!(prepared.line_map.original(line, column), Some(Position { line: 9, column: 1 }));
    let (line, _) =
        prepared.js.lines().enumerate().find(|(_, l)| l.contains("const a")).map(|(i, l)| (i as u32 + 1, l)).unwrap();
    assert_eq!(prepared.line_map.original(line, 1).map(|p| p.line), Some(6));
}

#[test]
fn syntax_errors_carry_the_users_coordinates() {
    let error = prepare("const a = 1;\nconst b: = 2;").unwrap_err();
    assert_eq!(error.kind, SourceErrorKind::Syntax);
    assert_eq!(error.position.map(|p| p.line), Some(2));
    assert!(error.message.starts_with("SyntaxError at codemode:user.js:2:"), "{}", error.message);
    assert!(error.message.ends_with("No tools were dispatched; correct the JavaScript source and submit it again."));
    // Columns count UTF-16 code units: the emoji is two (the second `=` is the 22nd character).
    let error = prepare("const s = '😀'; let = = 1;").unwrap_err();
    assert_eq!(error.position, Some(Position { line: 1, column: 23 }), "{}", error.message);
}

/// Nesting far beyond any parser's stack is refused by the scan, quickly and on this (small) test stack.
#[test]
fn hostile_nesting_is_refused_before_parsing() {
    let n = 10_000;
    let cases = [
        format!("return {}1{};", "(".repeat(n), ")".repeat(n)),
        format!("return {}1{};", "[".repeat(n), "]".repeat(n)),
        format!("return {}{};", "{a:".repeat(n), "}".repeat(n)),
        format!("{}{}", "{".repeat(n), "}".repeat(n)),
        format!("return `{}`;", "${`".repeat(n)),
        format!("return {}", "(".repeat(n)),
        format!("x = {}1", "!".repeat(n)),
        format!("x = {}1", "- ".repeat(n)),
        format!("{}x", "await ".repeat(n)),
        format!("{}1", "a=".repeat(n)),
        format!("{}1", "a?b:".repeat(n)),
        format!("{}1", "a=>".repeat(n)),
        format!("{}1", "a**".repeat(n)),
        format!("{}x", "if(a)".repeat(n)),
        format!("if(a){{}}{}", "else if(a){}".repeat(n)),
        format!("{}x", "l:".repeat(n)),
        format!("let x: {}x{};", "A<".repeat(n), ">".repeat(n)),
        format!("a ? {} : 1", "function(){} ? a : ".repeat(n)),
        format!("if(a)/**/{}x", "if(a)/**/".repeat(n)),
    ];
    for code in &cases {
        let error = prepare(code).expect_err(&code[..40.min(code.len())]);
        assert_eq!(error.kind, SourceErrorKind::TooDeep, "{}: {}", &code[..40], error.message);
    }
}

/// Left-deep trees the parser builds in a loop are bounded after the parse, before anything recurses over them.
#[test]
fn deep_trees_are_refused_after_parsing() {
    for code in [
        format!("return {}1;", "1 + ".repeat(100_000)),
        format!("return a{};", ".b".repeat(100_000)),
        format!("return f{};", "()".repeat(100_000)),
        format!("return a{};", "[0]".repeat(100_000)),
        format!("let x: A{};", ".B".repeat(100_000)),
    ] {
        let error = prepare(&code).expect_err(&code[..20]);
        assert_eq!(error.kind, SourceErrorKind::TooDeep, "{}", error.message);
        assert!(error.message.contains(&MAX_TREE_DEPTH.to_string()), "{}", error.message);
    }
}

#[test]
fn ordinary_nesting_is_accepted() {
    let n = MAX_NESTING;
    assert!(prepare(&format!("return {}1{};", "(".repeat(n), ")".repeat(n))).is_ok());
    assert!(prepare(&format!("return {}1{};", "(".repeat(n + 1), ")".repeat(n + 1))).is_err());
    // Many statements, each shallow, never add up.
    let many = "const a = b ? c : d;\nx = y = z;\nif (a) { f(); } else if (b) { g(); }\n".repeat(2_000);
    assert!(prepare(&many).is_ok());
    let no_semicolons = "x = 1\ny = a ? b : c\nfoo.bar = (v) => v\n".repeat(2_000);
    assert!(prepare(&no_semicolons).is_ok());
    let chain = format!("if (a) {{}}{}", " else if (a) {}".repeat(MAX_CHAIN / 2 - 1));
    assert!(prepare(&chain).is_ok());
    let long_sum = format!("return {}1;", "1 + ".repeat(MAX_TREE_DEPTH / 2));
    assert!(prepare(&long_sum).is_ok());
}

#[test]
fn error_messages() {
    let cases = [
        ("syntax", "const a = 1;\nconst b = ;".to_owned()),
        ("syntax_typescript", "const a: number = 1;\nfunction f(x: ) {}".to_owned()),
        ("module_access", "const fs = require('fs');".to_owned()),
        ("export_default", "const x = 1;\nexport default x;".to_owned()),
        ("too_deep_brackets", format!("return {}1{};", "[".repeat(200), "]".repeat(200))),
        ("too_deep_chain", format!("{}1", "a=".repeat(1_000))),
        ("too_deep_tree", format!("return {}1;", "1 + ".repeat(2_000))),
    ];
    for (name, code) in cases {
        insta::assert_snapshot!(name, outcome(&code));
    }
}
