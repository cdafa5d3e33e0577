//! What the parsed program may contain: module access (`import`, `import()`, `import.meta`, `require(...)`,
//! re-exports) is found on the syntax tree, never by regex, so strings and comments that mention it are fine.
//! The same single walk notes TypeScript-only syntax (the transform runs only when there is some), bounds the
//! tree's depth (left-deep chains such as `a + b + ...` that the parser builds without recursing) and lists the
//! top-level `export` keywords to strip. It is not a linter: everything else is left to the engine.

use oxc_ast::AstKind;
use oxc_ast::ast::{
    AccessorPropertyType, BindingIdentifier, Class, Expression, Function, FunctionType, ImportDeclaration,
    ImportDeclarationSpecifier, MethodDefinitionType, ModuleDeclaration, Program, PropertyDefinitionType, Statement,
    TSModuleReference, TSType, TSTypeName, VariableDeclaration, VariableDeclarationKind,
};
use oxc_ast::ast_kind::AstType;
use oxc_ast_visit::{Visit, walk};
use oxc_span::{GetSpan, Span};
use oxc_syntax::scope::ScopeFlags;

/// The deepest syntax tree accepted (each expression, statement or type is a level). oxc's transformer and
/// codegen, our own walk and Boa's compiler all recurse once per level.
pub const MAX_TREE_DEPTH: usize = 1000;

/// What the walk found.
#[derive(Debug, Default)]
pub(crate) struct Analysis {
    /// The first node that loads a module.
    pub module_access: Option<Span>,
    /// The first top-level `export` that has no meaning in a function body (`export default`, `export =`).
    pub unsupported_export: Option<Span>,
    /// Where the tree first grew deeper than [`MAX_TREE_DEPTH`].
    pub too_deep: Option<Span>,
    /// Whether any TypeScript-only syntax occurs.
    pub typescript: bool,
    /// Byte ranges to blank out: top-level `export` keywords and local `export { ... }` lists.
    pub blanks: Vec<Span>,
}

/// Walks `program` once.
pub(crate) fn analyze(program: &Program<'_>) -> Analysis {
    let mut walker = Walker { analysis: Analysis::default(), depth: 0 };
    walker.visit_program(program);
    let mut analysis = walker.analysis;
    for statement in &program.body {
        let Some(declaration) = statement.as_module_declaration() else { continue };
        match declaration {
            // `export const x = 1` keeps the declaration: strip the keyword so that `x` is a local.
            ModuleDeclaration::ExportDeclaration(export) => {
                analysis.blanks.push(Span::sized(export.span.start, "export".len() as u32));
            }
            // `export { a, b }` exports nothing from a function body; it is dropped whole.
            ModuleDeclaration::ExportNamedDeclaration(export) => analysis.blanks.push(export.span),
            ModuleDeclaration::ExportDefaultDeclaration(export) => {
                analysis.unsupported_export.get_or_insert(export.span);
            }
            ModuleDeclaration::TSExportAssignment(export) => {
                analysis.unsupported_export.get_or_insert(export.span);
            }
            ModuleDeclaration::TSNamespaceExportDeclaration(export) => {
                analysis.unsupported_export.get_or_insert(export.span);
            }
            // Type-only imports and re-exports load nothing; they are dropped whole. The others are module
            // access, which the walk reports.
            ModuleDeclaration::ImportDeclaration(import) if is_type_only_import(import) => {
                analysis.blanks.push(import.span);
            }
            ModuleDeclaration::ExportAllDeclaration(export) if export.export_kind.is_type() => {
                analysis.blanks.push(export.span);
            }
            ModuleDeclaration::ExportFromDeclaration(export) if export.export_kind.is_type() => {
                analysis.blanks.push(export.span);
            }
            ModuleDeclaration::ImportDeclaration(_)
            | ModuleDeclaration::ExportAllDeclaration(_)
            | ModuleDeclaration::ExportFromDeclaration(_) => {}
        }
    }
    analysis
}

/// Whether a module declaration survived the transform (it would be a syntax error in a function body).
pub(crate) fn first_module_declaration(program: &Program<'_>) -> Option<Span> {
    program.body.iter().find(|s| s.as_module_declaration().is_some()).map(GetSpan::span)
}

struct Walker {
    analysis: Analysis,
    depth: usize,
}

impl Walker {
    fn module_access(&mut self, span: Span) {
        self.analysis.module_access.get_or_insert(span);
    }

    /// Descends only while the tree is shallow enough; the caller's walk recurses.
    fn deeper(&mut self, span: Span) -> bool {
        if self.depth >= MAX_TREE_DEPTH {
            self.analysis.too_deep.get_or_insert(span);
            return false;
        }
        true
    }
}

/// Whether a callee is `require`, also through parentheses, a sequence (`(0, require)`), optional chaining or
/// a TypeScript wrapper (`(require as any)`).
fn is_require(callee: &Expression<'_>) -> bool {
    let mut current = callee;
    // Bounded by the tree depth check: each step goes one level down.
    for _ in 0..MAX_TREE_DEPTH {
        current = match current {
            Expression::Identifier(id) => return id.name == "require",
            Expression::ParenthesizedExpression(p) => &p.expression,
            Expression::SequenceExpression(s) => match s.expressions.last() {
                Some(last) => last,
                None => return false,
            },
            Expression::TSAsExpression(e) => &e.expression,
            Expression::TSSatisfiesExpression(e) => &e.expression,
            Expression::TSNonNullExpression(e) => &e.expression,
            Expression::TSTypeAssertion(e) => &e.expression,
            Expression::TSInstantiationExpression(e) => &e.expression,
            _ => return false,
        };
    }
    false
}

/// `import type { A } from "x"` or `import { type A, type B } from "x"`: erased, loads nothing.
fn is_type_only_import(import: &ImportDeclaration<'_>) -> bool {
    import.import_kind.is_type()
        || import.specifiers.as_ref().is_some_and(|specifiers| {
            !specifiers.is_empty()
                && specifiers
                    .iter()
                    .all(|s| matches!(s, ImportDeclarationSpecifier::ImportSpecifier(s) if s.import_kind.is_type()))
        })
}

fn is_typescript_node(ty: AstType) -> bool {
    // The TypeScript node types are one contiguous block of `AstType` (checked by a test through `prepare`),
    // with `Decorator` (not TypeScript-only) in the middle of it.
    let t = ty as u8;
    (AstType::TSThisParameter as u8..=AstType::TSInstantiationExpression as u8).contains(&t) && ty != AstType::Decorator
}

/// TypeScript-only syntax that is a flag on a JavaScript node rather than a node of its own (`declare`,
/// `private`, `readonly`, `abstract`, `override`, `x?` parameters, `x!` definite assignment, overloads).
fn has_typescript_modifier(kind: &AstKind<'_>) -> bool {
    match kind {
        AstKind::Function(f) => {
            f.declare
                || matches!(f.r#type, FunctionType::TSDeclareFunction | FunctionType::TSEmptyBodyFunctionExpression)
        }
        AstKind::FormalParameter(p) => p.accessibility.is_some() || p.readonly || p.r#override || p.optional,
        AstKind::Class(c) => c.r#abstract || c.declare,
        AstKind::MethodDefinition(m) => {
            m.r#type == MethodDefinitionType::TSAbstractMethodDefinition
                || m.r#override
                || m.optional
                || m.accessibility.is_some()
        }
        AstKind::PropertyDefinition(p) => {
            p.r#type == PropertyDefinitionType::TSAbstractPropertyDefinition
                || p.declare
                || p.r#override
                || p.optional
                || p.definite
                || p.readonly
                || p.accessibility.is_some()
        }
        AstKind::AccessorProperty(p) => {
            p.r#type == AccessorPropertyType::TSAbstractAccessorProperty
                || p.r#override
                || p.definite
                || p.accessibility.is_some()
        }
        AstKind::VariableDeclaration(v) => v.declare,
        AstKind::VariableDeclarator(d) => d.definite,
        _ => false,
    }
}

impl<'a> Visit<'a> for Walker {
    fn enter_node(&mut self, kind: AstKind<'a>) {
        self.depth += 1;
        if is_typescript_node(kind.ty()) || has_typescript_modifier(&kind) {
            self.analysis.typescript = true;
        }
        match kind {
            AstKind::ImportExpression(e) => self.module_access(e.span),
            AstKind::ImportMeta(e) => self.module_access(e.span),
            AstKind::CallExpression(call) if is_require(&call.callee) => self.module_access(call.span),
            AstKind::NewExpression(call) if is_require(&call.callee) => self.module_access(call.span),
            AstKind::ImportDeclaration(import) => {
                if is_type_only_import(import) {
                    self.analysis.typescript = true;
                } else {
                    self.module_access(import.span);
                }
            }
            AstKind::ExportAllDeclaration(export) => {
                if export.export_kind.is_type() {
                    self.analysis.typescript = true;
                } else {
                    self.module_access(export.span);
                }
            }
            AstKind::ExportFromDeclaration(export) => {
                if export.export_kind.is_type() {
                    self.analysis.typescript = true;
                } else {
                    self.module_access(export.span);
                }
            }
            AstKind::ExportNamedDeclaration(export) if export.export_kind.is_type() => {
                self.analysis.typescript = true;
            }
            AstKind::ExportSpecifier(s) if s.export_kind.is_type() => self.analysis.typescript = true,
            AstKind::ImportSpecifier(s) if s.import_kind.is_type() => self.analysis.typescript = true,
            AstKind::TSImportEqualsDeclaration(import)
                if matches!(import.module_reference, TSModuleReference::ExternalModuleReference(_))
                    && !import.import_kind.is_type() =>
            {
                self.module_access(import.span);
            }
            _ => {}
        }
    }

    fn leave_node(&mut self, _kind: AstKind<'a>) {
        self.depth -= 1;
    }

    fn visit_expression(&mut self, it: &Expression<'a>) {
        if self.deeper(it.span()) {
            walk::walk_expression(self, it);
        }
    }

    fn visit_statement(&mut self, it: &Statement<'a>) {
        if self.deeper(it.span()) {
            walk::walk_statement(self, it);
        }
    }

    fn visit_ts_type(&mut self, it: &TSType<'a>) {
        if self.deeper(it.span()) {
            walk::walk_ts_type(self, it);
        }
    }

    fn visit_ts_type_name(&mut self, it: &TSTypeName<'a>) {
        if self.deeper(it.span()) {
            walk::walk_ts_type_name(self, it);
        }
    }
}

/// Whether `program` binds `name` with hoisting: a top-level function declaration or a `var` anywhere outside
/// nested functions and classes. Such a name is a program's own, not a shell command.
pub(crate) fn hoists(program: &Program<'_>, name: &str) -> bool {
    for statement in &program.body {
        if let Statement::FunctionDeclaration(f) = statement
            && f.id.as_ref().is_some_and(|id| id.name == name)
        {
            return true;
        }
    }
    let mut finder = VarFinder { name, found: false, in_var: false, depth: 0 };
    finder.visit_program(program);
    finder.found
}

struct VarFinder<'n> {
    name: &'n str,
    found: bool,
    in_var: bool,
    depth: usize,
}

impl<'a> Visit<'a> for VarFinder<'_> {
    fn enter_node(&mut self, _kind: AstKind<'a>) {
        self.depth += 1;
    }

    fn leave_node(&mut self, _kind: AstKind<'a>) {
        self.depth -= 1;
    }

    fn visit_expression(&mut self, it: &Expression<'a>) {
        if self.depth < MAX_TREE_DEPTH {
            walk::walk_expression(self, it);
        }
    }

    fn visit_statement(&mut self, it: &Statement<'a>) {
        if self.depth < MAX_TREE_DEPTH {
            walk::walk_statement(self, it);
        }
    }

    fn visit_function(&mut self, _it: &Function<'a>, _flags: ScopeFlags) {}

    fn visit_arrow_function_expression(&mut self, _it: &oxc_ast::ast::ArrowFunctionExpression<'a>) {}

    fn visit_class(&mut self, _it: &Class<'a>) {}

    fn visit_variable_declaration(&mut self, it: &VariableDeclaration<'a>) {
        let var = it.kind == VariableDeclarationKind::Var;
        for declarator in &it.declarations {
            self.in_var = var;
            self.visit_binding_pattern(&declarator.id);
            self.in_var = false;
            if let Some(init) = &declarator.init {
                self.visit_expression(init);
            }
        }
    }

    fn visit_binding_identifier(&mut self, it: &BindingIdentifier<'a>) {
        if self.in_var && it.name == self.name {
            self.found = true;
        }
    }
}
