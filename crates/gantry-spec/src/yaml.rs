//! A small YAML node tree that remembers where every node and key starts.
//!
//! yaml-rust2's own `Yaml` type drops positions, so the tree is built here
//! from the parser's marked events. The parser is driven one event at a time
//! (not through its recursive `load`) so that nesting depth and alias
//! expansion can be capped before they exhaust the stack or memory.

use crate::diag::{Diags, Pos};
use std::collections::HashMap;
use yaml_rust2::parser::{Event, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// Deeper nesting than this is refused; real workflow files stay under 10.
const MAX_DEPTH: usize = 64;
/// Nodes allowed after aliases are expanded (guards against "billion laughs").
const MAX_NODES: usize = 200_000;

#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub pos: Pos,
    pub kind: Kind,
    /// Number of nodes in this subtree, kept to cap alias expansion cheaply.
    size: usize,
}

#[derive(Debug, Clone)]
pub(crate) enum Kind {
    Scalar(Scalar),
    Seq(Vec<Node>),
    Map(Vec<Entry>),
}

#[derive(Debug, Clone)]
pub(crate) struct Scalar {
    pub text: String,
    /// Plain scalars may be null, booleans or numbers; quoted and block
    /// scalars are always strings.
    pub plain: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub key: String,
    pub key_pos: Pos,
    pub value: Node,
}

impl Node {
    /// A node made by a rewrite (the v1 upgrade), placed where the text it
    /// stands for was written.
    pub fn scalar(pos: Pos, text: &str, plain: bool) -> Node {
        Node {
            pos,
            kind: Kind::Scalar(Scalar {
                text: text.to_string(),
                plain,
            }),
            size: 1,
        }
    }

    pub fn map(pos: Pos, entries: Vec<Entry>) -> Node {
        let size = 1 + entries.iter().map(|e| e.value.size).sum::<usize>();
        Node {
            pos,
            kind: Kind::Map(entries),
            size,
        }
    }

    /// The tree as yaml-rust2 values, for printing a rewritten file.
    pub fn to_yaml(&self) -> yaml_rust2::Yaml {
        use yaml_rust2::Yaml;
        match &self.kind {
            Kind::Scalar(_) if self.is_null() => Yaml::Null,
            Kind::Scalar(s) if s.plain => Yaml::from_str(&s.text),
            Kind::Scalar(s) => Yaml::String(s.text.clone()),
            Kind::Seq(items) => Yaml::Array(items.iter().map(Node::to_yaml).collect()),
            Kind::Map(entries) => Yaml::Hash(
                entries
                    .iter()
                    .map(|e| (Yaml::String(e.key.clone()), e.value.to_yaml()))
                    .collect(),
            ),
        }
    }

    pub fn is_null(&self) -> bool {
        match &self.kind {
            Kind::Scalar(s) => {
                s.plain && matches!(s.text.as_str(), "" | "~" | "null" | "Null" | "NULL")
            }
            _ => false,
        }
    }

    /// What kind of value this is, for messages ("expected a list, found a
    /// mapping").
    pub fn describe(&self) -> &'static str {
        match &self.kind {
            Kind::Seq(_) => "a list",
            Kind::Map(_) => "a mapping",
            Kind::Scalar(s) => {
                if self.is_null() {
                    "nothing (null)"
                } else if !s.plain {
                    "a string"
                } else if parse_bool(&s.text).is_some() {
                    "a boolean"
                } else if parse_int(&s.text).is_some() {
                    "an integer"
                } else if s.text.parse::<f64>().is_ok() {
                    "a number"
                } else {
                    "a string"
                }
            }
        }
    }
}

pub(crate) fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

/// YAML 1.2 core-schema integers: decimal with an optional sign, `0x`, `0o`.
pub(crate) fn parse_int(text: &str) -> Option<i128> {
    let (neg, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let value = if let Some(hex) = body.strip_prefix("0x") {
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        i128::from_str_radix(hex, 16).ok()?
    } else if let Some(oct) = body.strip_prefix("0o") {
        if oct.is_empty() || !oct.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
            return None;
        }
        i128::from_str_radix(oct, 8).ok()?
    } else {
        if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        body.parse::<i128>().ok()?
    };
    Some(if neg { -value } else { value })
}

/// yaml-rust2's lines are 1-based but its columns 0-based (whatever its
/// docs say); diagnostics are 1-based in both.
fn pos_of(m: Marker) -> Pos {
    Pos::new(m.line(), m.col() + 1)
}

enum Frame {
    Seq {
        pos: Pos,
        anchor: usize,
        items: Vec<Node>,
        size: usize,
    },
    Map {
        pos: Pos,
        anchor: usize,
        entries: Vec<Entry>,
        /// Set while the value of a key is awaited.
        key: Option<(String, Pos)>,
        /// A key that could not be used (not a scalar); its value is dropped.
        bad_key: bool,
        merges: Vec<Node>,
        /// Key -> where it is first set, so duplicates are found in O(1).
        seen: HashMap<String, Pos>,
        size: usize,
    },
}

struct Builder<'d> {
    diags: &'d mut Diags,
    stack: Vec<Frame>,
    anchors: HashMap<usize, Node>,
    root: Option<Node>,
    total: usize,
}

/// Why building stopped early; the diagnostic is already recorded.
struct Stop;

impl Builder<'_> {
    fn scalar_node(pos: Pos, text: String, style: TScalarStyle, tag: Option<&Tag>) -> Node {
        let mut plain = style == TScalarStyle::Plain;
        if let Some(tag) = tag {
            if tag.handle == "!!" {
                // `!!str 5` is the string "5"; `!!int "5"` the integer 5.
                plain = tag.suffix != "str";
            }
        }
        Node {
            pos,
            kind: Kind::Scalar(Scalar { text, plain }),
            size: 1,
        }
    }

    fn finish(&mut self, node: Node, anchor: usize) -> Result<(), Stop> {
        if anchor != 0 {
            self.anchors.insert(anchor, node.clone());
        }
        self.attach(node)
    }

    fn attach(&mut self, node: Node) -> Result<(), Stop> {
        match self.stack.last_mut() {
            None => {
                self.root = Some(node);
                Ok(())
            }
            Some(Frame::Seq { items, size, .. }) => {
                *size += node.size;
                items.push(node);
                Ok(())
            }
            Some(Frame::Map {
                entries,
                key,
                bad_key,
                merges,
                seen,
                size,
                ..
            }) => {
                if *bad_key {
                    *bad_key = false;
                    return Ok(());
                }
                match key.take() {
                    None => {
                        match &node.kind {
                            Kind::Scalar(s) if !node.is_null() || !s.plain => {
                                *key = Some((s.text.clone(), node.pos));
                            }
                            Kind::Scalar(_) => {
                                self.diags
                                    .err(node.pos, "", "empty key; every key must be a name");
                                *bad_key = true;
                            }
                            _ => {
                                self.diags.err(
                                    node.pos,
                                    "",
                                    format!("a key must be a name, not {}", node.describe()),
                                );
                                *bad_key = true;
                            }
                        }
                        Ok(())
                    }
                    Some((k, key_pos)) => {
                        *size += node.size;
                        if k == "<<" {
                            merges.push(node);
                            return Ok(());
                        }
                        if let Some(first) = seen.get(&k) {
                            self.diags.err(
                                key_pos,
                                "",
                                format!("duplicate key `{k}` (first set at {first}); remove one"),
                            );
                            return Ok(());
                        }
                        seen.insert(k.clone(), key_pos);
                        entries.push(Entry {
                            key: k,
                            key_pos,
                            value: node,
                        });
                        Ok(())
                    }
                }
            }
        }
    }

    fn push(&mut self, frame: Frame, pos: Pos) -> Result<(), Stop> {
        if self.stack.len() >= MAX_DEPTH {
            self.diags.err(
                pos,
                "",
                format!("nesting deeper than {MAX_DEPTH} levels; a workflow file never needs this"),
            );
            return Err(Stop);
        }
        self.stack.push(frame);
        Ok(())
    }

    fn count(&mut self, n: usize, pos: Pos) -> Result<(), Stop> {
        self.total += n;
        if self.total > MAX_NODES {
            self.diags.err(
                pos,
                "",
                format!("the document expands to more than {MAX_NODES} values (through aliases?)"),
            );
            return Err(Stop);
        }
        Ok(())
    }

    /// `<<: *base` (or a list of them) copies the keys the mapping does not
    /// set itself; earlier merge sources win over later ones.
    fn apply_merges(&mut self, entries: &mut Vec<Entry>, merges: Vec<Node>) {
        let mut present: std::collections::HashSet<String> =
            entries.iter().map(|e| e.key.clone()).collect();
        for merge in merges {
            let sources: Vec<Node> = match merge.kind {
                Kind::Map(_) => vec![merge],
                Kind::Seq(items) => items,
                _ => {
                    self.diags.err(
                        merge.pos,
                        "",
                        "`<<` must merge a mapping or a list of mappings",
                    );
                    continue;
                }
            };
            for src in sources {
                match src.kind {
                    Kind::Map(src_entries) => {
                        for e in src_entries {
                            if present.insert(e.key.clone()) {
                                entries.push(e);
                            }
                        }
                    }
                    _ => self.diags.err(
                        src.pos,
                        "",
                        "`<<` must merge a mapping or a list of mappings",
                    ),
                }
            }
        }
    }

    fn event(&mut self, ev: Event, mark: Marker) -> Result<(), Stop> {
        let pos = pos_of(mark);
        match ev {
            Event::Scalar(text, style, anchor, tag) => {
                self.count(1, pos)?;
                let node = Self::scalar_node(pos, text, style, tag.as_ref());
                self.finish(node, anchor)
            }
            Event::SequenceStart(anchor, _) => {
                self.count(1, pos)?;
                self.push(
                    Frame::Seq {
                        pos,
                        anchor,
                        items: Vec::new(),
                        size: 1,
                    },
                    pos,
                )
            }
            Event::MappingStart(anchor, _) => {
                self.count(1, pos)?;
                self.push(
                    Frame::Map {
                        pos,
                        anchor,
                        entries: Vec::new(),
                        key: None,
                        bad_key: false,
                        merges: Vec::new(),
                        seen: HashMap::new(),
                        size: 1,
                    },
                    pos,
                )
            }
            Event::SequenceEnd => match self.stack.pop() {
                Some(Frame::Seq {
                    pos,
                    anchor,
                    items,
                    size,
                }) => self.finish(
                    Node {
                        pos,
                        kind: Kind::Seq(items),
                        size,
                    },
                    anchor,
                ),
                _ => Ok(()),
            },
            Event::MappingEnd => match self.stack.pop() {
                Some(Frame::Map {
                    pos,
                    anchor,
                    mut entries,
                    merges,
                    size,
                    ..
                }) => {
                    // A block mapping's start event is marked after its
                    // first key; the mapping starts at that key.
                    let pos = entries.iter().map(|e| e.key_pos).fold(pos, Pos::min);
                    self.apply_merges(&mut entries, merges);
                    self.finish(
                        Node {
                            pos,
                            kind: Kind::Map(entries),
                            size,
                        },
                        anchor,
                    )
                }
                _ => Ok(()),
            },
            Event::Alias(id) => match self.anchors.get(&id).map(|n| n.size) {
                Some(size) => {
                    self.count(size, pos)?;
                    match self.anchors.get(&id) {
                        Some(node) => {
                            let node = node.clone();
                            self.attach(node)
                        }
                        None => Ok(()),
                    }
                }
                None => {
                    self.diags.err(pos, "", "alias to an unknown anchor");
                    Err(Stop)
                }
            },
            Event::DocumentStart => {
                if self.root.is_some() {
                    self.diags.err(
                        pos,
                        "",
                        "a second YAML document; a workflow file holds exactly one",
                    );
                    return Err(Stop);
                }
                Ok(())
            }
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => Ok(()),
        }
    }
}

/// Parses YAML text into a node tree. Syntax errors, duplicate keys and the
/// like are recorded in `diags`; `None` means nothing usable was read.
pub(crate) fn load(source: &str, diags: &mut Diags) -> Option<Node> {
    let mut parser = Parser::new_from_str(source);
    let mut b = Builder {
        diags,
        stack: Vec::new(),
        anchors: HashMap::new(),
        root: None,
        total: 0,
    };
    loop {
        match parser.next_token() {
            Ok((Event::StreamEnd, _)) => break,
            Ok((ev, mark)) => {
                if b.event(ev, mark).is_err() {
                    return None;
                }
            }
            Err(e) => {
                let m = e.marker();
                b.diags
                    .err(pos_of(*m), "", format!("YAML syntax error: {}", e.info()));
                return None;
            }
        }
    }
    if b.root.is_none() {
        b.diags.err(
            Pos::new(1, 1),
            "",
            "the file is empty; a workflow starts with `version: v4`",
        );
    }
    b.root
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(src: &str) -> (Option<Node>, Vec<crate::Diagnostic>) {
        let mut d = Diags::default();
        let n = load(src, &mut d);
        (n, d.into_sorted())
    }

    #[test]
    fn positions_are_one_based() {
        let (n, d) = tree("a:\n  b: 1\n");
        assert!(d.is_empty(), "{d:?}");
        let n = n.unwrap();
        let Kind::Map(entries) = &n.kind else {
            panic!()
        };
        assert_eq!(entries[0].key_pos, Pos::new(1, 1));
        let Kind::Map(inner) = &entries[0].value.kind else {
            panic!()
        };
        assert_eq!(inner[0].key_pos, Pos::new(2, 3));
        assert_eq!(inner[0].value.pos, Pos::new(2, 6));
    }

    #[test]
    fn duplicate_keys() {
        let (_, d) = tree("a: 1\nb: 2\na: 3\n");
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].pos(), Pos::new(3, 1));
        assert_eq!(
            d[0].message,
            "duplicate key `a` (first set at 1:1); remove one"
        );
    }

    #[test]
    fn merge_keys_and_aliases() {
        let (n, d) = tree("base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  y: 3\n");
        assert!(d.is_empty(), "{d:?}");
        let Kind::Map(entries) = &n.unwrap().kind else {
            panic!()
        };
        let Kind::Map(c) = &entries[1].value.kind else {
            panic!()
        };
        let keys: Vec<_> = c.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["y", "x"]);
    }

    #[test]
    fn billion_laughs_is_capped() {
        let mut src = String::from("a: &a [x,x,x,x,x,x,x,x,x,x]\n");
        let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
        for w in names.windows(2) {
            src.push_str(&format!(
                "{}: &{} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n",
                w[1],
                w[1],
                p = w[0]
            ));
        }
        let (n, d) = tree(&src);
        assert!(n.is_none());
        assert!(d[0].message.contains("more than 200000 values"), "{d:?}");
    }

    #[test]
    fn deep_nesting_is_refused() {
        let src = "[".repeat(100) + &"]".repeat(100);
        let (n, d) = tree(&src);
        assert!(n.is_none());
        assert_eq!(d[0].pos(), Pos::new(1, 65));
    }

    #[test]
    fn syntax_error_has_position() {
        let (n, d) = tree("a: [1, 2\nb: 3\n");
        assert!(n.is_none());
        assert_eq!(d.len(), 1);
        assert!(d[0].message.starts_with("YAML syntax error: "), "{d:?}");
    }

    #[test]
    fn ints() {
        assert_eq!(parse_int("42"), Some(42));
        assert_eq!(parse_int("-7"), Some(-7));
        assert_eq!(parse_int("0x1F"), Some(31));
        assert_eq!(parse_int("0o17"), Some(15));
        assert_eq!(parse_int("1.5"), None);
        assert_eq!(parse_int(""), None);
        assert_eq!(parse_int("-"), None);
        assert_eq!(parse_int("0x"), None);
    }
}
