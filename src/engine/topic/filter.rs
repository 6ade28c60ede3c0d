//! SNS subscription filter policies: parsed and validated once (with AWS's limits and messages),
//! then evaluated per message against its attributes or its JSON body. Pure.

use std::net::IpAddr;

use serde_json::{Map, Value};

use crate::engine::message::{AttributeData, MessageAttributes};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    MessageAttributes,
    MessageBody,
}

const MAX_KEYS: usize = 5;
/// A policy document may be at most 256 KB.
const MAX_POLICY_BYTES: usize = 256 * 1024;
/// Subscriptions with a filter policy, per topic.
pub const MAX_POLICIES_PER_TOPIC: usize = 200;
const MAX_COMBINATIONS: usize = 150;
/// Numbers are compared with 5 decimal digits of precision.
const PRECISION: f64 = 1e5;

#[derive(Clone, Debug, PartialEq)]
enum Condition {
    Text(String),
    Number(f64),
    Null,
    Bool(bool),
    Prefix(String),
    Suffix(String),
    EqualsIgnoreCase(String),
    /// Present, and no value is one of these.
    AnythingBut(Vec<Literal>),
    AnythingButPrefix(String),
    Numeric {
        lower: Option<(f64, bool)>,
        upper: Option<(f64, bool)>,
    },
    Exists(bool),
    Cidr {
        network: IpAddr,
        bits: u8,
    },
}

#[derive(Clone, Debug, PartialEq)]
enum Literal {
    Text(String),
    Number(f64),
}

#[derive(Clone, Debug, PartialEq)]
enum Rule {
    Conditions(Vec<Condition>),
    /// Body scope: a nested object of the policy mirrors one of the body.
    Nested(Policy),
}

/// Keys ANDed, and every `$or` group must have one matching branch.
#[derive(Clone, Debug, PartialEq, Default)]
struct Policy {
    keys: Vec<(String, Rule)>,
    any_of: Vec<Vec<Policy>>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FilterPolicy {
    policy: Policy,
    pub scope: Scope,
}

/// A value found in a message, reduced to what conditions compare.
#[derive(Clone, Debug, PartialEq)]
enum Found {
    Text(String),
    Number(f64),
    Bool(bool),
    Null,
    /// A `String.Array` value that is not JSON: invalid, as SNS counts such messages filtered
    /// out for their attributes. A policy key naming it fails whatever its operator.
    Malformed,
}

fn same_number(a: f64, b: f64) -> bool {
    (a * PRECISION).round() == (b * PRECISION).round()
}

fn parse_literal(value: &Value) -> Result<Literal, String> {
    match value {
        Value::String(s) => Ok(Literal::Text(s.clone())),
        Value::Number(n) => Ok(Literal::Number(n.as_f64().unwrap_or(0.0))),
        _ => Err("Match value must be String, number, true, false, or null".into()),
    }
}

fn string_operand(op: &str, value: &Value) -> Result<String, String> {
    value
        .as_str()
        .map(String::from)
        .ok_or_else(|| format!("{op} match pattern must be a string"))
}

fn parse_numeric(items: &[Value]) -> Result<Condition, String> {
    let op_name = |op: &str| {
        if op == "=" {
            "equals".to_string()
        } else {
            op.to_string()
        }
    };
    let operand = |op: &str, v: Option<&Value>| {
        v.and_then(Value::as_f64)
            .ok_or_else(|| format!("Value of {} must be numeric", op_name(op)))
    };
    let first = items
        .first()
        .ok_or_else(|| "Invalid member in numeric match: ]".to_string())?;
    let op = first
        .as_str()
        .ok_or_else(|| format!("Invalid member in numeric match: {first}"))?;
    if !matches!(op, "=" | "<" | "<=" | ">" | ">=") {
        return Err(format!("Unrecognized numeric range operator: {op}"));
    }
    let value = operand(op, items.get(1))?;
    if items.len() > 4 {
        return Err("Too many terms in numeric range expression".into());
    }
    let (mut lower, mut upper) = (None, None);
    match op {
        "=" => {
            lower = Some((value, true));
            upper = Some((value, true));
        }
        "<" | "<=" => upper = Some((value, op == "<=")),
        _ => lower = Some((value, op == ">=")),
    }
    if items.len() > 2 {
        if matches!(op, "=" | "<" | "<=") {
            return Err("Too many elements in numeric expression".into());
        }
        let second = &items[2];
        let op2 = second
            .as_str()
            .ok_or_else(|| format!("Bad value in numeric range: {second}"))?;
        if !matches!(op2, "<" | "<=") {
            return Err(format!("Bad numeric range operator: {op2}"));
        }
        let top = operand(op2, items.get(3))?;
        if value >= top {
            return Err("Bottom must be less than top".into());
        }
        upper = Some((top, op2 == "<="));
    }
    Ok(Condition::Numeric { lower, upper })
}

fn parse_cidr(text: &str) -> Result<Condition, String> {
    let (ip, bits) = text
        .split_once('/')
        .ok_or_else(|| "Malformed CIDR, one '/' required".to_string())?;
    let network: IpAddr = ip
        .parse()
        .map_err(|_| format!("Nonstandard IP address: {ip}"))?;
    let bits: u8 = bits
        .parse()
        .map_err(|_| "Malformed CIDR, mask bits must be an integer".to_string())?;
    let max = if network.is_ipv4() { 32 } else { 128 };
    if bits > max {
        return Err("Malformed CIDR, mask bits must be an integer".into());
    }
    Ok(Condition::Cidr { network, bits })
}

fn parse_operator(object: &Map<String, Value>) -> Result<Condition, String> {
    if object.len() != 1 {
        return Err("Only one key allowed in match expression".into());
    }
    let (op, value) = object.iter().next().expect("one key");
    match op.as_str() {
        "prefix" => Ok(Condition::Prefix(string_operand(op, value)?)),
        "suffix" => Ok(Condition::Suffix(string_operand(op, value)?)),
        "equals-ignore-case" => Ok(Condition::EqualsIgnoreCase(string_operand(op, value)?)),
        "cidr" => parse_cidr(&string_operand("prefix", value)?),
        "exists" => match value {
            Value::Bool(b) => Ok(Condition::Exists(*b)),
            _ => Err("exists match pattern must be either true or false.".into()),
        },
        "numeric" => match value {
            Value::Array(items) => parse_numeric(items),
            other => Err(format!("Invalid member in numeric match: {other}")),
        },
        "anything-but" => match value {
            Value::Array(items) if !items.is_empty() => Ok(Condition::AnythingBut(
                items.iter().map(parse_literal).collect::<Result<_, _>>()?,
            )),
            Value::Array(_) => Err("Empty arrays are not allowed".into()),
            Value::Object(inner) => {
                let (inner_op, inner_value) = inner
                    .iter()
                    .next()
                    .ok_or("Only one key allowed in match expression")?;
                if inner.len() != 1 {
                    return Err("Only one key allowed in match expression".into());
                }
                match inner_op.as_str() {
                    "prefix" => Ok(Condition::AnythingButPrefix(string_operand(
                        "prefix",
                        inner_value,
                    )?)),
                    other => Err(format!("Unsupported anything-but pattern: {other}")),
                }
            }
            scalar => Ok(Condition::AnythingBut(vec![parse_literal(scalar)?])),
        },
        other => Err(format!("Unrecognized match type {other}")),
    }
}

fn parse_condition(value: &Value) -> Result<Condition, String> {
    match value {
        Value::String(s) => Ok(Condition::Text(s.clone())),
        Value::Number(n) => Ok(Condition::Number(n.as_f64().unwrap_or(0.0))),
        Value::Bool(b) => Ok(Condition::Bool(*b)),
        Value::Null => Ok(Condition::Null),
        Value::Object(object) => parse_operator(object),
        Value::Array(_) => Err("Match value must be String, number, true, false, or null".into()),
    }
}

fn parse_policy(object: &Map<String, Value>, scope: Scope) -> Result<Policy, String> {
    let mut policy = Policy::default();
    for (key, value) in object {
        match (key.as_str(), value) {
            ("$or", Value::Array(branches)) if branches.len() >= 2 => {
                let group = branches
                    .iter()
                    .map(|b| match b {
                        Value::Object(o) => parse_policy(o, scope),
                        _ => Err("\"$or\" must be an array of objects".to_string()),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                policy.any_of.push(group);
            }
            ("$or", _) => return Err("\"$or\" must be an array of at least two objects".into()),
            (_, Value::Array(items)) if items.is_empty() => {
                return Err("Empty arrays are not allowed".into())
            }
            (_, Value::Array(items)) => {
                let conditions = items
                    .iter()
                    .map(parse_condition)
                    .collect::<Result<_, _>>()?;
                policy
                    .keys
                    .push((key.clone(), Rule::Conditions(conditions)));
            }
            (_, Value::Object(nested)) => {
                if scope == Scope::MessageAttributes {
                    return Err("Filter policy scope MessageAttributes does not support nested filter policy".into());
                }
                policy
                    .keys
                    .push((key.clone(), Rule::Nested(parse_policy(nested, scope)?)));
            }
            _ => return Err(format!("\"{key}\" must be an object or an array")),
        }
    }
    Ok(policy)
}

/// Distinct attribute names used anywhere in the policy.
fn attribute_keys<'a>(policy: &'a Policy, out: &mut Vec<&'a str>) {
    for (key, _) in &policy.keys {
        if !out.contains(&key.as_str()) {
            out.push(key);
        }
    }
    for branch in policy.any_of.iter().flatten() {
        attribute_keys(branch, out);
    }
}

/// AWS's combination count: the product of the condition lists (in body scope each list counts
/// once per nesting level), with `$or` branches added.
fn combinations(policy: &Policy, depth: usize, scope: Scope) -> usize {
    let mut total: usize = 1;
    for (_, rule) in &policy.keys {
        let n = match rule {
            Rule::Conditions(c) if scope == Scope::MessageBody => c.len() * depth,
            Rule::Conditions(c) => c.len(),
            Rule::Nested(p) => combinations(p, depth + 1, scope),
        };
        total = total.saturating_mul(n.max(1));
    }
    for group in &policy.any_of {
        let sum: usize = group.iter().map(|b| combinations(b, depth, scope)).sum();
        total = total.saturating_mul(sum.max(1));
    }
    total
}

impl FilterPolicy {
    /// Parses and validates; the error is AWS's text after the "FilterPolicy: " prefix position.
    pub fn parse(json: &str, scope: Scope) -> Result<FilterPolicy, String> {
        if json.len() > MAX_POLICY_BYTES {
            return Err("FilterPolicy: Filter policy is too long; the limit is 256 KB".into());
        }
        let value: Value = serde_json::from_str(json)
            .map_err(|e| format!("FilterPolicy: failed to parse JSON. {e}"))?;
        let Value::Object(object) = value else {
            return Err("FilterPolicy: Filter policy must be a JSON object".into());
        };
        let policy = parse_policy(&object, scope).map_err(|e| {
            if e.starts_with("Filter policy scope") {
                e
            } else {
                format!("FilterPolicy: {e}")
            }
        })?;
        let key_count = match scope {
            Scope::MessageAttributes => {
                let mut keys = Vec::new();
                attribute_keys(&policy, &mut keys);
                keys.len()
            }
            Scope::MessageBody => policy.keys.len(),
        };
        if key_count > MAX_KEYS {
            return Err("FilterPolicy: Filter policy can not have more than 5 keys".into());
        }
        if combinations(&policy, 1, scope) > MAX_COMBINATIONS {
            return Err("FilterPolicy: Filter policy is too complex".into());
        }
        Ok(FilterPolicy { policy, scope })
    }

    /// Does a message pass? `body` is the text the subscription would receive (before enveloping).
    pub fn matches(&self, attributes: &MessageAttributes, body: &str) -> bool {
        let parsed = parse_body(body);
        self.matches_parsed(attributes, &|| parsed.as_ref())
    }

    /// As `matches`, with the body parsed by the caller, once per message for all subscriptions
    /// (`None` when it is not JSON). It is asked for only in body scope.
    pub fn matches_parsed<'a>(
        &self,
        attributes: &MessageAttributes,
        body: &dyn Fn() -> Option<&'a Value>,
    ) -> bool {
        match self.scope {
            Scope::MessageAttributes => {
                matches_policy(&self.policy, &|key| attribute_values(attributes, key))
            }
            Scope::MessageBody => match body() {
                Some(Value::Object(object)) => matches_body(&self.policy, object),
                _ => false,
            },
        }
    }
}

/// A message body as body-scope policies see it (`None` when it is not JSON): a dotted key
/// is read as the nested path it spells, so `{"a.b": {"c": 1}}` and `{"a": {"b.c": 1}}` are
/// both `{"a": {"b": {"c": 1}}}`, as AWS documents dotted keys. Two values at one path are
/// both kept, as an array, so either may match.
pub fn parse_body(text: &str) -> Option<Value> {
    serde_json::from_str(text).ok().map(expand_dotted)
}

fn expand_dotted(value: Value) -> Value {
    match value {
        Value::Array(items) => Value::Array(items.into_iter().map(expand_dotted).collect()),
        Value::Object(object) => {
            let mut out = Map::new();
            for (key, value) in object {
                insert_path(&mut out, &key, expand_dotted(value));
            }
            Value::Object(out)
        }
        other => other,
    }
}

/// Puts `value` at the path `key` spells (creating objects on the way); a key with an empty
/// part, or whose path runs into a non-object, stays as written.
fn insert_path(out: &mut Map<String, Value>, key: &str, value: Value) {
    let parts: Vec<&str> = key.split('.').collect();
    let (last, path) = parts.split_last().expect("split yields a part");
    let blocked = || {
        let mut current = &*out;
        for part in path {
            match current.get(*part) {
                None => return false,
                Some(Value::Object(next)) => current = next,
                Some(_) => return true,
            }
        }
        false
    };
    if path.is_empty() || parts.iter().any(|p| p.is_empty()) || blocked() {
        merge(out, key, value);
        return;
    }
    let mut current = out;
    for part in path {
        let next = current
            .entry(part.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        current = next.as_object_mut().expect("checked: objects all the way");
    }
    merge(current, last, value);
}

/// Adds `value` under `key`: objects merge, other values already there are kept beside it.
fn merge(out: &mut Map<String, Value>, key: &str, value: Value) {
    match (out.get_mut(key), value) {
        (None, value) => {
            out.insert(key.to_string(), value);
        }
        (Some(Value::Object(existing)), Value::Object(more)) => {
            for (k, v) in more {
                merge(existing, &k, v);
            }
        }
        (Some(existing), value) => {
            let mut both = match existing.take() {
                Value::Array(items) => items,
                other => vec![other],
            };
            both.push(value);
            *existing = Value::Array(both);
        }
    }
}

/// The comparable values of one attribute; `None` when absent (Binary counts as absent).
fn attribute_values(attributes: &MessageAttributes, key: &str) -> Option<Vec<Found>> {
    let value = attributes.get(key)?;
    let AttributeData::String(text) = &value.data else {
        return None;
    };
    let base = value.data_type.split('.').next().unwrap_or("");
    match (base, value.data_type.as_str()) {
        ("Number", _) => Some(vec![text
            .trim()
            .parse::<f64>()
            .map(Found::Number)
            .unwrap_or(Found::Text(text.clone()))]),
        (_, "String.Array") => match serde_json::from_str::<Value>(text) {
            Ok(Value::Array(items)) => Some(items.iter().filter_map(leaf).collect()),
            // JSON but not an array: that one value (SNS matches the bare `100` as the number).
            Ok(other) => Some(vec![
                leaf(&other).unwrap_or_else(|| Found::Text(text.clone()))
            ]),
            Err(_) => Some(vec![Found::Malformed]),
        },
        ("String", _) => Some(vec![Found::Text(text.clone())]),
        _ => None,
    }
}

fn leaf(value: &Value) -> Option<Found> {
    match value {
        Value::String(s) => Some(Found::Text(s.clone())),
        Value::Number(n) => n.as_f64().map(Found::Number),
        Value::Bool(b) => Some(Found::Bool(*b)),
        Value::Null => Some(Found::Null),
        _ => None,
    }
}

fn matches_policy(policy: &Policy, values: &dyn Fn(&str) -> Option<Vec<Found>>) -> bool {
    policy.keys.iter().all(|(key, rule)| match rule {
        Rule::Conditions(conditions) => {
            key_matches(conditions, values(key).filter(|v| !v.is_empty()))
        }
        Rule::Nested(_) => false,
    }) && policy
        .any_of
        .iter()
        .all(|group| group.iter().any(|branch| matches_policy(branch, values)))
}

/// The body value at a policy key: the literal key, or for a dotted key the nested path.
fn lookup<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    object.get(key).or_else(|| {
        let mut parts = key.split('.');
        let mut current = object.get(parts.next()?)?;
        for part in parts {
            current = current.as_object()?.get(part)?;
        }
        Some(current)
    })
}

/// Leaves under a body value, descending into arrays (of arrays).
fn body_leaves(value: &Value, out: &mut Vec<Found>) {
    match value {
        Value::Array(items) => items.iter().for_each(|i| body_leaves(i, out)),
        other => out.extend(leaf(other)),
    }
}

/// Objects under a body value, descending into arrays (arrays of objects are traversed).
fn body_objects<'a>(value: &'a Value, out: &mut Vec<&'a Map<String, Value>>) {
    match value {
        Value::Object(o) => out.push(o),
        Value::Array(items) => items.iter().for_each(|i| body_objects(i, out)),
        _ => {}
    }
}

fn matches_body(policy: &Policy, object: &Map<String, Value>) -> bool {
    policy.keys.iter().all(|(key, rule)| {
        let value = lookup(object, key);
        match rule {
            Rule::Conditions(conditions) => {
                let found = value.map(|v| {
                    let mut leaves = Vec::new();
                    body_leaves(v, &mut leaves);
                    leaves
                });
                // An empty array, or an object where a leaf is expected, counts as absent.
                key_matches(conditions, found.filter(|l| !l.is_empty()))
            }
            Rule::Nested(nested) => {
                let mut objects = Vec::new();
                if let Some(v) = value {
                    body_objects(v, &mut objects);
                }
                objects.iter().any(|o| matches_body(nested, o))
            }
        }
    }) && policy
        .any_of
        .iter()
        .all(|group| group.iter().any(|branch| matches_body(branch, object)))
}

/// One key: any condition matches the values found (`None` = key absent).
fn key_matches(conditions: &[Condition], found: Option<Vec<Found>>) -> bool {
    if (found.iter().flatten()).any(|value| matches!(value, Found::Malformed)) {
        return false;
    }
    conditions
        .iter()
        .any(|condition| match (condition, &found) {
            (Condition::Exists(wanted), f) => *wanted == f.is_some(),
            (_, None) => false,
            (Condition::AnythingBut(listed), Some(values)) => !values
                .iter()
                .any(|v| listed.iter().any(|l| literal_equals(l, v))),
            (Condition::AnythingButPrefix(prefix), Some(values)) => !values
                .iter()
                .any(|v| matches!(v, Found::Text(t) if t.starts_with(prefix.as_str()))),
            (c, Some(values)) => values.iter().any(|v| condition_matches(c, v)),
        })
}

fn literal_equals(literal: &Literal, found: &Found) -> bool {
    match (literal, found) {
        (Literal::Text(a), Found::Text(b)) => a == b,
        (Literal::Number(a), Found::Number(b)) => same_number(*a, *b),
        _ => false,
    }
}

fn in_network(ip: IpAddr, network: IpAddr, bits: u8) -> bool {
    let (value, net, width) = match (ip, network) {
        (IpAddr::V4(a), IpAddr::V4(n)) => (u32::from(a) as u128, u32::from(n) as u128, 32),
        (IpAddr::V6(a), IpAddr::V6(n)) => (u128::from(a), u128::from(n), 128),
        _ => return false,
    };
    if bits == 0 {
        return true;
    }
    let shift = width - bits as u32;
    (value >> shift) == (net >> shift)
}

fn condition_matches(condition: &Condition, found: &Found) -> bool {
    match (condition, found) {
        (Condition::Text(a), Found::Text(b)) => a == b,
        (Condition::Number(a), Found::Number(b)) => same_number(*a, *b),
        (Condition::Null, Found::Null) => true,
        (Condition::Bool(a), Found::Bool(b)) => a == b,
        (Condition::Prefix(p), Found::Text(t)) => t.starts_with(p.as_str()),
        (Condition::Suffix(s), Found::Text(t)) => t.ends_with(s.as_str()),
        (Condition::EqualsIgnoreCase(a), Found::Text(t)) => a.to_lowercase() == t.to_lowercase(),
        (Condition::Numeric { lower, upper }, Found::Number(n)) => {
            let above = lower.is_none_or(|(v, inclusive)| {
                if inclusive {
                    *n >= v || same_number(*n, v)
                } else {
                    *n > v && !same_number(*n, v)
                }
            });
            let below = upper.is_none_or(|(v, inclusive)| {
                if inclusive {
                    *n <= v || same_number(*n, v)
                } else {
                    *n < v && !same_number(*n, v)
                }
            });
            above && below
        }
        (Condition::Cidr { network, bits }, Found::Text(t)) => t
            .parse::<IpAddr>()
            .is_ok_and(|ip| in_network(ip, *network, *bits)),
        _ => false,
    }
}

#[cfg(test)]
mod tests;
