//! The runtime's layers, checked on its source.
//!
//! Every module of `actors/src` belongs to one layer of [`LAYERS`], bottom up;
//! the book draws them (docs/book/architecture.md, "Layers"). A module uses
//! only what its own layer and the layers below define, and no file uses a
//! file that uses it back. `use` paths are followed through re-exports to the
//! module that defines the item, so a re-export does not hide an upward
//! import; a re-export itself is naming, not use, and is not an edge. Tests
//! (`#[cfg(test)]` modules, `tests.rs` files) may use any layer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use syn::visit::Visit;

/// A module, as the path of names from the crate's root.
type Module = Vec<String>;

/// The layers, bottom up. A module belongs to the layer of the longest name
/// here that is itself or one of its ancestors (`crate`: the root).
const LAYERS: &[(&str, &[&str])] = &[
    (
        "foundation",
        &[
            "error",
            "events",
            "faults",
            "named",
            "stats",
            "stragglers",
            "system",
        ],
    ),
    ("the replica", &["recovery", "hogwild", "params", "learner"]),
    ("the tables", &["embedding"]),
    (
        "what a round computes, who meets whom",
        &[
            "sync::rules::algorithm",
            "sync::rules::combined",
            "sync::rules::math",
            "sync::rules::settings",
            "sync::schedule",
            "sync::transport::link",
        ],
    ),
    ("the settings of sync", &["sync::config"]),
    (
        "rules and schedules by name",
        &["sync::rules", "sync::schedule::registry"],
    ),
    ("how values travel", &["sync::transport"]),
    ("the coordinator", &["sync::coordinator"]),
    (
        "a trainer's side of a round",
        &["sync::peer", "sync::shared", "sync"],
    ),
    ("the actors", &["trainer", "shadow", "monitor", "evaluator"]),
    ("the cluster", &["cluster"]),
    ("the crate's surface", &["crate"]),
];

/// What a module's source says: the paths it uses (absolute), and the names
/// it re-exports (to the absolute path they name).
#[derive(Default)]
struct Source {
    uses: BTreeSet<Module>,
    reexports: BTreeMap<String, Module>,
}

/// The crate: its modules (one a file) and what each says.
struct Crate {
    sources: BTreeMap<Module, Source>,
}

#[test]
fn no_module_uses_a_higher_layer() {
    let krate = Crate::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let mut upward = Vec::new();
    for (edge_from, edge_to) in krate.edges() {
        let (from, to) = (layer(&edge_from), layer(&edge_to));
        if to.0 > from.0 {
            upward.push(format!(
                "{} ({}) uses {} ({})",
                edge_from.join("::"),
                from.1,
                edge_to.join("::"),
                to.1
            ));
        }
    }
    assert!(
        upward.is_empty(),
        "imports up the layers:\n{}",
        upward.join("\n")
    );
}

#[test]
fn no_file_uses_a_file_that_uses_it() {
    let krate = Crate::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let mut graph: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (from, to) in krate.edges() {
        graph.entry(from).or_default().insert(to);
    }
    if let Some(circle) = find_circle(&graph) {
        let names: Vec<String> = circle.iter().map(|m| m.join("::")).collect();
        panic!("an import circle: {}", names.join(" → "));
    }
}

#[test]
fn uses_resolve_through_reexports_and_modules_to_their_layers() {
    // `sync/rules/mod.rs` re-exports `WriteBack` from `hogwild` (lower): a
    // use of `crate::sync::WriteBack` resolves to where it is defined.
    let krate = Crate::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let path = |p: &str| p.split("::").map(String::from).collect::<Module>();
    assert_eq!(
        krate.resolve(&path("sync::WriteBack::Delta"), 0),
        path("hogwild")
    );
    assert_eq!(
        krate.resolve(&path("sync::Combined"), 0),
        path("sync::rules::combined")
    );
    assert_eq!(layer(&path("cluster::wiring")).1, "the cluster");
    assert!(layer(&path("sync::peer")).0 > layer(&path("sync::transport::fabric")).0);
    assert!(layer(&path("sync::transport::link")).0 < layer(&path("sync::transport")).0);
}

/// The layer of `module`: its index in [`LAYERS`] and its name.
fn layer(module: &[String]) -> (usize, &'static str) {
    let name = match module {
        [] => "crate".to_string(),
        _ => module.join("::"),
    };
    let within = |entry: &str| name == entry || name.starts_with(&format!("{entry}::"));
    LAYERS
        .iter()
        .enumerate()
        .flat_map(|(index, (layer, entries))| entries.iter().map(move |e| (index, *layer, *e)))
        .filter(|(_, _, entry)| within(entry))
        .max_by_key(|(_, _, entry)| entry.len())
        .map(|(index, layer, _)| (index, layer))
        .unwrap_or_else(|| panic!("`{name}` is in no layer: add it to LAYERS and the book"))
}

impl Crate {
    /// Parses every file under `src`.
    fn read(src: &Path) -> Self {
        let mut files = Vec::new();
        collect_files(src, &mut Vec::new(), &mut files);
        let modules: BTreeSet<Module> = files.iter().map(|(m, _)| m.clone()).collect();
        let sources = files
            .into_iter()
            .map(|(module, text)| {
                let file =
                    syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", module.join("::")));
                let mut reader = Reader {
                    modules: &modules,
                    at: module.clone(),
                    source: Source::default(),
                };
                reader.visit_file(&file);
                (module, reader.source)
            })
            .collect();
        Self { sources }
    }

    /// The module that defines what `path` names: followed down the modules,
    /// then through the re-exports of the module it stops in.
    fn resolve(&self, path: &[String], depth: usize) -> Module {
        let mut module = Module::new();
        let mut rest = path;
        while let Some((first, tail)) = rest.split_first() {
            let mut next = module.clone();
            next.push(first.clone());
            if !self.sources.contains_key(&next) {
                break;
            }
            (module, rest) = (next, tail);
        }
        let reexported = rest
            .first()
            .and_then(|name| self.sources.get(&module)?.reexports.get(name));
        match reexported {
            Some(target) if depth < 16 => {
                let mut path = target.clone();
                path.extend(rest[1..].iter().cloned());
                self.resolve(&path, depth + 1)
            }
            _ => module,
        }
    }

    /// Every use of one module by another, each to where the item is defined.
    fn edges(&self) -> BTreeSet<(Module, Module)> {
        let mut edges = BTreeSet::new();
        for (module, source) in &self.sources {
            for path in &source.uses {
                let target = self.resolve(path, 0);
                if &target != module {
                    edges.insert((module.clone(), target));
                }
            }
        }
        edges
    }
}

/// Every `.rs` file under `dir`, with its module path (`mod.rs` and `lib.rs`
/// name their folder's module).
fn collect_files(dir: &Path, at: &mut Module, files: &mut Vec<(Module, String)>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a UTF-8 name");
        if path.is_dir() {
            at.push(name.to_string());
            collect_files(&path, at, files);
            at.pop();
        } else if path.extension().is_some_and(|e| e == "rs") && name != "tests" {
            // (A `tests.rs` holds its parent's tests, which may use any layer.)
            let mut module = at.clone();
            if name != "mod" && name != "lib" {
                module.push(name.to_string());
            }
            let text = std::fs::read_to_string(&path).expect("a readable source file");
            files.push((module, text));
        }
    }
}

/// Reads one file's `use` items and the paths in its code.
struct Reader<'a> {
    modules: &'a BTreeSet<Module>,
    /// The module being read (inline modules, such as `mod tests`, included).
    at: Module,
    source: Source,
}

impl Reader<'_> {
    /// `segments` as an absolute path, if they name something of this crate.
    fn absolute(&self, segments: &[String]) -> Option<Module> {
        let (first, rest) = segments.split_first()?;
        let mut base = self.at.clone();
        match first.as_str() {
            "crate" => base.clear(),
            "self" => {}
            "super" => {
                base.pop();
                let mut rest = rest;
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop();
                    rest = &rest[1..];
                }
                base.extend(rest.iter().cloned());
                return Some(base);
            }
            child => {
                base.push(child.to_string());
                // A path from a child module of this one; anything else
                // (another crate, a name in scope) is not this crate's.
                return self.modules.contains(&base).then(|| {
                    base.extend(rest.iter().cloned());
                    base
                });
            }
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// Records every path of a `use` tree; a re-export's under the name it gives.
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree, reexport: bool) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree, reexport);
                prefix.pop();
            }
            syn::UseTree::Name(n) if n.ident == "self" => {
                let name = prefix.last().cloned();
                self.record(prefix, name, reexport);
            }
            syn::UseTree::Name(n) => {
                prefix.push(n.ident.to_string());
                self.record(prefix, Some(n.ident.to_string()), reexport);
                prefix.pop();
            }
            syn::UseTree::Rename(r) => {
                prefix.push(r.ident.to_string());
                self.record(prefix, Some(r.rename.to_string()), reexport);
                prefix.pop();
            }
            syn::UseTree::Glob(_) => self.record(prefix, None, reexport),
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(prefix, tree, reexport);
                }
            }
        }
    }

    /// Records the path `segments` of a `use`, if it is this crate's.
    fn record(&mut self, segments: &[String], name: Option<String>, reexport: bool) {
        let Some(path) = self.absolute(segments) else {
            return;
        };
        match (reexport, name) {
            (true, Some(name)) => {
                self.source.reexports.insert(name, path);
            }
            (true, None) => {}
            (false, _) => {
                self.source.uses.insert(path);
            }
        }
    }
}

impl<'ast> Visit<'ast> for Reader<'_> {
    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        let reexport = !matches!(item.vis, syn::Visibility::Inherited);
        let mut prefix = Vec::new();
        if item.leading_colon.is_none() {
            self.use_tree(&mut prefix, &item.tree, reexport);
        }
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if item.content.is_some() && !is_test_only(&item.attrs) {
            self.at.push(item.ident.to_string());
            syn::visit::visit_item_mod(self, item);
            self.at.pop();
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if segments.len() > 1 && path.leading_colon.is_none() {
            if let Some(path) = self.absolute(&segments) {
                self.source.uses.insert(path);
            }
        }
        syn::visit::visit_path(self, path);
    }
}

/// Whether `attrs` hold `#[cfg(test)]`: tests may use any layer to test one.
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
    })
}

/// A circle in `graph`, if it has one: its modules in order, the first again
/// at the end.
fn find_circle(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    // Depth first, the modules on the current path in `path`.
    fn visit(
        graph: &BTreeMap<Module, BTreeSet<Module>>,
        module: &Module,
        path: &mut Vec<Module>,
        done: &mut BTreeSet<Module>,
    ) -> Option<Vec<Module>> {
        if let Some(at) = path.iter().position(|m| m == module) {
            let mut circle = path[at..].to_vec();
            circle.push(module.clone());
            return Some(circle);
        }
        if !done.insert(module.clone()) {
            return None;
        }
        path.push(module.clone());
        for next in graph.get(module).into_iter().flatten() {
            if let Some(circle) = visit(graph, next, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|module| visit(graph, module, &mut Vec::new(), &mut done))
}
