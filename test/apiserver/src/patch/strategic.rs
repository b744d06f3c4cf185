//! Kubernetes strategic merge patch.
//!
//! Objects merge member by member and `null` deletes a member, as in a JSON merge patch. Lists follow the
//! strategy the schema gives their field:
//! - atomic lists are replaced by the patch list;
//! - lists merged by key match each patch element to the first stored element with the same key and merge the
//!   two objects; unmatched patch elements are added; elements `{key: ..., "$patch": "delete"}` delete every stored
//!   element with that key, and an element `{"$patch": "replace"}` makes the rest of the patch list the whole list;
//! - primitive sets are unioned with the patch list.
//!
//! After a merge, elements named in the patch come first in patch order and stored elements not named in the patch
//! are woven back in their stored order, the way the real server orders them. Map directives: `$patch: replace`
//! (the map becomes the patch), `$patch: delete` (the map is removed), `$patch: merge` (the default),
//! `$retainKeys` (drop stored members not listed), `$setElementOrder/<list>` (final order of a list) and
//! `$deleteFromPrimitiveList/<list>` (remove values from a primitive list).
//!
//! Recursion follows the patch, whose depth the JSON decoder bounds; the stored object is only walked where the
//! patch leads.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::schema::{FieldPath, ListStrategy, Schema};
use super::value::{go_kind, identity, parse_error_message};
use super::{GENERIC_INVALID_MESSAGE, PatchError};

const PATCH_DIRECTIVE: &str = "$patch";
const RETAIN_KEYS_DIRECTIVE: &str = "$retainKeys";
const SET_ELEMENT_ORDER_PREFIX: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE_LIST_PREFIX: &str = "$deleteFromPrimitiveList/";

/// Decodes `body` as a strategic merge patch and applies it to a copy of `original` using `schema`.
pub(super) fn apply(original: &Value, body: &[u8], schema: Schema) -> Result<Value, PatchError> {
    let patch: Value = serde_json::from_slice(body)
        .map_err(|error| PatchError::BadRequest(parse_error_message(&error)))?;
    let patch = match patch {
        Value::Object(members) => members,
        // The Go decoder reads `null` as an empty patch.
        Value::Null => return Ok(original.clone()),
        other => {
            return Err(PatchError::BadRequest(format!(
                "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                go_kind(&other)
            )));
        }
    };
    let mut document = match original {
        Value::Object(members) => members.clone(),
        _ => Map::new(),
    };
    let merger = Merger { schema };
    match merger.merge_map(&mut document, &patch, &FieldPath::ROOT)? {
        MapOutcome::Keep => Ok(Value::Object(document)),
        MapOutcome::Delete => Ok(Value::Object(Map::new())),
    }
}

/// What became of a map after merging a patch into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MapOutcome {
    /// The map stays (merged or replaced in place).
    Keep,
    /// The patch said `$patch: delete`: the map goes away.
    Delete,
}

/// Whether a member name is a patch directive rather than data.
fn is_directive_key(name: &str) -> bool {
    name == PATCH_DIRECTIVE
        || name == RETAIN_KEYS_DIRECTIVE
        || name.starts_with(SET_ELEMENT_ORDER_PREFIX)
        || name.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX)
}

fn unknown_directive(directive: &Value) -> PatchError {
    PatchError::BadRequest(format!(
        "unknown patch directive {directive}: expected replace, delete or merge"
    ))
}

fn missing_merge_key(key: &str) -> PatchError {
    PatchError::BadRequest(format!(
        "a list element does not contain the declared merge key {key:?}"
    ))
}

fn generic_invalid() -> PatchError {
    PatchError::Invalid(GENERIC_INVALID_MESSAGE.to_owned())
}

/// The identity of a list element for matching and ordering: the merge key's value for objects of a keyed list,
/// the element itself otherwise. `None` for an object lacking the merge key.
fn element_identity(element: &Value, key: Option<&str>) -> Option<String> {
    match (key, element) {
        (Some(key), Value::Object(members)) => members.get(key).map(identity),
        _ => Some(identity(element)),
    }
}

/// The position of the first element with each identity.
fn first_positions<'a>(
    elements: impl IntoIterator<Item = &'a Value>,
    key: Option<&str>,
) -> HashMap<String, usize> {
    let mut positions = HashMap::new();
    for (position, element) in elements.into_iter().enumerate() {
        if let Some(id) = element_identity(element, key) {
            positions.entry(id).or_insert(position);
        }
    }
    positions
}

/// Orders a merged list the way the real server does. Elements named in `reference` (the patch list or a
/// `$setElementOrder` list) are sorted by their position there; the others keep their `stored` order; the two runs
/// are then woven together, a stored-only element going first only when both it and the next referenced element
/// are in the stored list and it was stored earlier.
fn reorder(
    merged: Vec<Value>,
    key: Option<&str>,
    reference: &HashMap<String, usize>,
    stored: &HashMap<String, usize>,
) -> Vec<Value> {
    let mut referenced: Vec<(usize, Option<usize>, Value)> = Vec::new();
    let mut stored_only: Vec<(Option<usize>, Value)> = Vec::new();
    for element in merged {
        let id = element_identity(&element, key);
        let stored_position = id.as_ref().and_then(|id| stored.get(id).copied());
        match id.as_ref().and_then(|id| reference.get(id).copied()) {
            Some(position) => referenced.push((position, stored_position, element)),
            None => stored_only.push((stored_position, element)),
        }
    }
    referenced.sort_by_key(|(position, _, _)| *position);
    stored_only.sort_by_key(|(stored_position, _)| stored_position.unwrap_or(usize::MAX));

    let mut out = Vec::with_capacity(referenced.len() + stored_only.len());
    let mut left = stored_only.into_iter().peekable();
    let mut right = referenced.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (Some((Some(l), _)), Some((_, Some(r), _))) => l < r,
            (Some(_), Some(_)) => false,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        if take_left {
            if let Some((_, element)) = left.next() {
                out.push(element);
            }
        } else if let Some((_, _, element)) = right.next() {
            out.push(element);
        }
    }
    out
}

/// A copy of an atomic-list value as the typed server would store it: directive members and `null` members of
/// objects are dropped.
fn sanitize(value: &Value) -> Value {
    match value {
        Value::Object(members) => Value::Object(
            members
                .iter()
                .filter(|(name, member)| !is_directive_key(name) && !member.is_null())
                .map(|(name, member)| (name.clone(), sanitize(member)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(sanitize).collect()),
        other => other.clone(),
    }
}

/// The kind code of JSON objects.
const OBJECT_KIND: u8 = 5;

/// A small code per JSON kind, to check that list elements agree.
fn kind_code(value: &Value) -> u8 {
    match value {
        Value::Null => 0,
        Value::Bool(_) => 1,
        Value::Number(_) => 2,
        Value::String(_) => 3,
        Value::Array(_) => 4,
        Value::Object(_) => OBJECT_KIND,
    }
}

/// The common element kind of two lists to be merged, `None` when both are empty.
fn element_kind(stored: &[Value], patch: &[Value]) -> Result<Option<u8>, PatchError> {
    let mut kind = None;
    for element in stored.iter().chain(patch) {
        let code = kind_code(element);
        if element.is_array() {
            // Lists of lists cannot be merged (the real server answers 422).
            return Err(generic_invalid());
        }
        match kind {
            None => kind = Some(code),
            Some(previous) if previous != code => {
                return Err(PatchError::BadRequest(
                    "the elements of a merged list must all be of the same type".to_owned(),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(kind)
}

/// Applies a strategic merge patch with one resource's schema.
struct Merger {
    schema: Schema,
}

impl Merger {
    /// Merges `patch` into the map `original`, honouring a `$patch` directive of the map itself.
    fn merge_map(
        &self,
        original: &mut Map<String, Value>,
        patch: &Map<String, Value>,
        path: &FieldPath<'_>,
    ) -> Result<MapOutcome, PatchError> {
        if let Some(directive) = patch.get(PATCH_DIRECTIVE) {
            match directive.as_str() {
                Some("replace") => {
                    let mut fresh = Map::new();
                    self.merge_members(&mut fresh, patch, path)?;
                    *original = fresh;
                    return Ok(MapOutcome::Keep);
                }
                Some("delete") => return Ok(MapOutcome::Delete),
                Some("merge") => {}
                _ => return Err(unknown_directive(directive)),
            }
        }
        self.merge_members(original, patch, path)?;
        Ok(MapOutcome::Keep)
    }

    /// A value for a field the stored object lacks (or holds with another JSON type): the patch value merged into
    /// nothing, so that directives and `null`s inside it are resolved. `None` when nothing is left.
    fn fresh(&self, patch: &Value, path: &FieldPath<'_>) -> Result<Option<Value>, PatchError> {
        match patch {
            Value::Object(members) => self.fresh_map(members, path),
            Value::Array(items) => Ok(Some(Value::Array(self.merge_list(
                Vec::new(),
                items,
                path,
            )?))),
            Value::Null => Ok(None),
            other => Ok(Some(other.clone())),
        }
    }

    fn fresh_map(
        &self,
        patch: &Map<String, Value>,
        path: &FieldPath<'_>,
    ) -> Result<Option<Value>, PatchError> {
        let mut fresh = Map::new();
        Ok(match self.merge_map(&mut fresh, patch, path)? {
            MapOutcome::Keep => Some(Value::Object(fresh)),
            MapOutcome::Delete => None,
        })
    }

    /// Merges the members of `patch` into `original`, processing the map-level directives.
    fn merge_members(
        &self,
        original: &mut Map<String, Value>,
        patch: &Map<String, Value>,
        path: &FieldPath<'_>,
    ) -> Result<(), PatchError> {
        if let Some(retain) = patch.get(RETAIN_KEYS_DIRECTIVE) {
            retain_keys(original, patch, retain)?;
        }
        let mut ordered: HashSet<&str> = HashSet::new();
        for (name, order) in patch {
            if let Some(field) = name.strip_prefix(SET_ELEMENT_ORDER_PREFIX)
                && self.set_element_order(original, field, order, patch.get(field), path)?
            {
                ordered.insert(field);
            }
        }
        for (name, value) in patch {
            if is_directive_key(name) || ordered.contains(name.as_str()) {
                continue;
            }
            self.merge_member(original, name, value, path)?;
        }
        for (name, values) in patch {
            if let Some(field) = name.strip_prefix(DELETE_FROM_PRIMITIVE_LIST_PREFIX) {
                delete_from_primitive_list(original, field, values)?;
            }
        }
        Ok(())
    }

    /// Merges the patch value of one member into `original`.
    fn merge_member(
        &self,
        original: &mut Map<String, Value>,
        name: &str,
        value: &Value,
        path: &FieldPath<'_>,
    ) -> Result<(), PatchError> {
        let child = path.child(name);
        if value.is_null() {
            original.shift_remove(name);
            return Ok(());
        }
        match (original.get_mut(name), value) {
            (Some(Value::Object(stored)), Value::Object(members)) => {
                if self.merge_map(stored, members, &child)? == MapOutcome::Delete {
                    original.shift_remove(name);
                }
            }
            (Some(Value::Array(stored)), Value::Array(items)) => {
                let merged = self.merge_list(std::mem::take(stored), items, &child)?;
                *stored = merged;
            }
            _ => match self.fresh(value, &child)? {
                Some(fresh) => {
                    original.insert(name.to_owned(), fresh);
                }
                None => {
                    original.shift_remove(name);
                }
            },
        }
        Ok(())
    }

    /// Merges a patch list into a stored list according to the field's strategy.
    fn merge_list(
        &self,
        stored: Vec<Value>,
        patch: &[Value],
        path: &FieldPath<'_>,
    ) -> Result<Vec<Value>, PatchError> {
        match self.schema.list_strategy(path) {
            ListStrategy::Atomic => Ok(patch.iter().map(sanitize).collect()),
            ListStrategy::MergeByKey(key) => {
                self.merge_mergeable_list(stored, patch, Some(key), path)
            }
            ListStrategy::PrimitiveSet => self.merge_mergeable_list(stored, patch, None, path),
        }
    }

    fn merge_mergeable_list(
        &self,
        stored: Vec<Value>,
        patch: &[Value],
        key: Option<&'static str>,
        path: &FieldPath<'_>,
    ) -> Result<Vec<Value>, PatchError> {
        match element_kind(&stored, patch)? {
            None => Ok(stored),
            Some(OBJECT_KIND) => {
                let key = key.ok_or_else(|| {
                    PatchError::BadRequest(
                        "a list of objects without a merge key cannot be merged".to_owned(),
                    )
                })?;
                self.merge_object_list(stored, patch, key, path)
            }
            Some(_) => Ok(merge_scalar_list(stored, patch)),
        }
    }

    /// Merges a list of objects by `key`.
    fn merge_object_list(
        &self,
        stored: Vec<Value>,
        patch: &[Value],
        key: &'static str,
        path: &FieldPath<'_>,
    ) -> Result<Vec<Value>, PatchError> {
        let mut deleted: HashSet<String> = HashSet::new();
        let mut replace = false;
        let mut elements: Vec<&Map<String, Value>> = Vec::new();
        for item in patch {
            let Value::Object(members) = item else {
                continue;
            };
            match members.get(PATCH_DIRECTIVE) {
                None => elements.push(members),
                Some(directive) => match directive.as_str() {
                    Some("delete") => {
                        let value = members.get(key).ok_or_else(|| missing_merge_key(key))?;
                        deleted.insert(identity(value));
                    }
                    Some("replace") => replace = true,
                    // An explicit merge is the default; a bare `{"$patch": "merge"}` says nothing more.
                    Some("merge") => {
                        if members.len() > 1 {
                            elements.push(members);
                        }
                    }
                    _ => return Err(unknown_directive(directive)),
                },
            }
        }
        if replace {
            let mut list = Vec::with_capacity(elements.len());
            for members in elements {
                if let Some(element) = self.fresh_map(members, path)? {
                    list.push(element);
                }
            }
            return Ok(list);
        }

        let mut merged = stored;
        if !deleted.is_empty() {
            merged.retain(|element| {
                element_identity(element, Some(key)).is_none_or(|id| !deleted.contains(&id))
            });
        }
        let stored_positions = first_positions(&merged, Some(key));
        let mut positions = stored_positions.clone();
        for members in &elements {
            let id = identity(members.get(key).ok_or_else(|| missing_merge_key(key))?);
            match positions.get(&id).copied() {
                Some(position) => {
                    if let Some(Value::Object(target)) = merged.get_mut(position) {
                        self.merge_members(target, members, path)?;
                    }
                }
                None => {
                    if let Some(element) = self.fresh_map(members, path)? {
                        positions.insert(id, merged.len());
                        merged.push(element);
                    }
                }
            }
        }
        let patch_positions = first_positions(
            elements
                .iter()
                .map(|members| members.get(key).unwrap_or(&Value::Null)),
            None,
        );
        Ok(reorder(
            merged,
            Some(key),
            &patch_positions,
            &stored_positions,
        ))
    }

    /// Applies `$setElementOrder/<field>`: merges the patch list of the field (if any) and then orders the result
    /// by `order`. Returns whether the field's patch list has been consumed.
    fn set_element_order(
        &self,
        original: &mut Map<String, Value>,
        field: &str,
        order: &Value,
        patch_list: Option<&Value>,
        path: &FieldPath<'_>,
    ) -> Result<bool, PatchError> {
        let Value::Array(order) = order else {
            return Err(PatchError::BadRequest(
                "invalid patch format of setElementOrder list".to_owned(),
            ));
        };
        let patch_list = match patch_list {
            None => None,
            Some(Value::Array(items)) => Some(items.as_slice()),
            // A null or scalar for the field is merged as an ordinary member.
            Some(_) => return Ok(false),
        };
        let child = path.child(field);
        let key = match self.schema.list_strategy(&child) {
            ListStrategy::MergeByKey(key) => Some(key),
            ListStrategy::Atomic | ListStrategy::PrimitiveSet => None,
        };
        if let Some(key) = key
            && order.iter().any(|element| {
                element
                    .as_object()
                    .is_some_and(|members| !members.contains_key(key))
            })
        {
            return Err(missing_merge_key(key));
        }
        if let Some(items) = patch_list {
            validate_order(items, order, key)?;
        }
        let stored = match original.get_mut(field) {
            Some(Value::Array(items)) => Some(std::mem::take(items)),
            _ => None,
        };
        let stored_positions = stored
            .as_ref()
            .map(|items| first_positions(items, key))
            .unwrap_or_default();
        let merged = match (stored, patch_list) {
            (Some(stored), Some(items)) => self.merge_list(stored, items, &child)?,
            (Some(stored), None) => stored,
            (None, Some(items)) => self.merge_list(Vec::new(), items, &child)?,
            (None, None) => return Ok(false),
        };
        let order_positions = first_positions(order, key);
        let ordered = reorder(merged, key, &order_positions, &stored_positions);
        original.insert(field.to_owned(), Value::Array(ordered));
        Ok(true)
    }
}

/// Unions two scalar lists, dropping duplicates.
fn merge_scalar_list(stored: Vec<Value>, patch: &[Value]) -> Vec<Value> {
    let stored_positions = first_positions(&stored, None);
    let patch_positions = first_positions(patch, None);
    let mut seen = HashSet::new();
    let mut merged = Vec::with_capacity(stored.len() + patch.len());
    for element in stored.into_iter().chain(patch.iter().cloned()) {
        if seen.insert(identity(&element)) {
            merged.push(element);
        }
    }
    reorder(merged, None, &patch_positions, &stored_positions)
}

/// Checks that the (non-directive) elements of a patch list appear in the `$setElementOrder` list in the same
/// relative order.
fn validate_order(patch: &[Value], order: &[Value], key: Option<&str>) -> Result<(), PatchError> {
    let data: Vec<&Value> = patch
        .iter()
        .filter(|element| {
            !element
                .as_object()
                .is_some_and(|members| members.contains_key(PATCH_DIRECTIVE))
        })
        .collect();
    let mut in_patch = 0;
    let mut in_order = 0;
    while in_patch < data.len() && in_order < order.len() {
        let patch_id = data
            .get(in_patch)
            .and_then(|element| element_identity(element, key));
        let order_id = order
            .get(in_order)
            .and_then(|element| element_identity(element, key));
        if patch_id.is_some() && patch_id == order_id {
            in_patch += 1;
        }
        in_order += 1;
    }
    if in_patch < data.len() && !order.is_empty() {
        return Err(PatchError::BadRequest(
            "the order of the patch list does not match its $setElementOrder list".to_owned(),
        ));
    }
    Ok(())
}

/// Applies `$retainKeys`: stored members not listed are dropped; the patch may only set listed members.
fn retain_keys(
    original: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    retain: &Value,
) -> Result<(), PatchError> {
    let bad_format = || PatchError::BadRequest("invalid patch format of retainKeys".to_owned());
    let Value::Array(names) = retain else {
        return Err(bad_format());
    };
    let keep: HashSet<&str> = names
        .iter()
        .map(Value::as_str)
        .collect::<Option<_>>()
        .ok_or_else(bad_format)?;
    let conflicting = patch.iter().any(|(name, value)| {
        !is_directive_key(name) && !value.is_null() && !keep.contains(name.as_str())
    });
    if conflicting {
        return Err(generic_invalid());
    }
    original.retain(|name, _| keep.contains(name.as_str()));
    Ok(())
}

/// Applies `$deleteFromPrimitiveList/<field>`: removes every listed value from the stored list.
fn delete_from_primitive_list(
    original: &mut Map<String, Value>,
    field: &str,
    values: &Value,
) -> Result<(), PatchError> {
    let bad_format = || PatchError::BadRequest("invalid patch format of primitive list".to_owned());
    let Value::Array(values) = values else {
        return Err(bad_format());
    };
    if values
        .iter()
        .any(|value| value.is_object() || value.is_array())
    {
        return Err(bad_format());
    }
    if let Some(Value::Array(stored)) = original.get_mut(field) {
        let doomed: HashSet<String> = values.iter().map(identity).collect();
        stored.retain(|element| !doomed.contains(&identity(element)));
    }
    Ok(())
}
