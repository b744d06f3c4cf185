//! The schema definitions of the OpenAPI documents, generated from k8s-openapi's JSON schemas (the
//! Kubernetes API types' own documentation) for the kinds the resource table serves, with what the real
//! server adds: `x-kubernetes-group-version-kind` on every kind and list, and the strategic-merge list
//! strategies (`x-kubernetes-patch-strategy`, `x-kubernetes-patch-merge-key`) the server's patch engine
//! applies.

use k8s_openapi::api::{authentication, authorization, coordination, core, events};
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::schemars::JsonSchema;
use k8s_openapi::schemars::generate::{SchemaGenerator, SchemaSettings};
use k8s_openapi::schemars::transform::RemoveRefSiblings;
use k8s_openapi::{ListableResource, Resource};
use serde_json::{Map, Value, json};

use crate::resources::{Backing, ResourceDef, Storage};

/// Which OpenAPI version a set of definitions is for: it decides where references point and whether a
/// reference with a description is wrapped in `allOf` (OpenAPI 3, as the real server writes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// Swagger 2.0 (`/openapi/v2`): `#/definitions/...`.
    V2,
    /// OpenAPI 3.0 (`/openapi/v3/...`): `#/components/schemas/...`.
    V3,
}

impl Flavor {
    /// The prefix of a reference to a definition.
    pub(crate) fn ref_prefix(self) -> &'static str {
        match self {
            Flavor::V2 => "#/definitions/",
            Flavor::V3 => "#/components/schemas/",
        }
    }

    /// A reference to the definition `name`.
    pub(crate) fn reference(self, name: &str) -> Value {
        json!({"$ref": format!("{}{name}", self.ref_prefix())})
    }
}

/// The definition names of one served kind.
#[derive(Debug, Clone)]
pub(crate) struct KindSchemas {
    /// The kind's definition (`io.k8s.api.core.v1.Node`).
    pub object: String,
    /// The list's definition (`io.k8s.api.core.v1.NodeList`), for listable kinds.
    pub list: Option<String>,
}

/// Collects the definitions of one document.
pub(crate) struct Definitions {
    flavor: Flavor,
    generator: SchemaGenerator,
    /// Lists built here (k8s-openapi has one generic list type without a schema).
    lists: Map<String, Value>,
    /// (definition, group, version, kind) of every kind and list registered.
    kinds: Vec<(String, &'static str, &'static str, &'static str)>,
    /// (definition of the kind, resource plural) whose list strategies are published.
    patched: Vec<(String, &'static str)>,
}

impl Definitions {
    /// An empty set of definitions.
    pub(crate) fn new(flavor: Flavor) -> Self {
        let settings = match flavor {
            Flavor::V2 => SchemaSettings::draft07().with(|s| {
                s.definitions_path = "/definitions".into();
                s.meta_schema = None;
                s.transforms.clear();
            }),
            Flavor::V3 => SchemaSettings::openapi3().with(|s| {
                s.meta_schema = None;
                s.transforms.clear();
                s.transforms.push(Box::new(RemoveRefSiblings::default()));
            }),
        };
        Self {
            flavor,
            generator: settings.into_generator(),
            lists: Map::new(),
            kinds: Vec::new(),
            patched: Vec::new(),
        }
    }

    /// Registers `T` and returns its definition name.
    pub(crate) fn define<T: JsonSchema>(&mut self) -> String {
        self.generator.subschema_for::<T>();
        T::schema_name().into_owned()
    }

    /// Registers a kind and its list.
    fn listable<T: JsonSchema + ListableResource>(&mut self) -> KindSchemas {
        let object = self.define::<T>();
        let list = format!("{object}{}", "List");
        self.define::<meta::ListMeta>();
        let item = self.flavor.reference(&object);
        self.lists.insert(
            list.clone(),
            list_schema(self.flavor, T::KIND, T::LIST_KIND, item),
        );
        self.kinds
            .push((object.clone(), T::GROUP, T::VERSION, T::KIND));
        self.kinds
            .push((list.clone(), T::GROUP, T::VERSION, T::LIST_KIND));
        KindSchemas {
            object,
            list: Some(list),
        }
    }

    /// Registers a kind that has no list (create-only reviews, subresource kinds).
    fn single<T: JsonSchema + Resource>(&mut self) -> KindSchemas {
        let object = self.define::<T>();
        self.kinds
            .push((object.clone(), T::GROUP, T::VERSION, T::KIND));
        KindSchemas { object, list: None }
    }

    /// Registers the kinds of a served resource and returns their definition names.
    pub(crate) fn resource(&mut self, def: &'static ResourceDef) -> KindSchemas {
        let kinds = match (def.backing, def.is_events_v1()) {
            (Backing::Stored(Storage::Nodes), _) => self.listable::<core::v1::Node>(),
            (Backing::Stored(Storage::Services), _) => self.listable::<core::v1::Service>(),
            (Backing::Stored(Storage::PersistentVolumes), _) => {
                self.listable::<core::v1::PersistentVolume>()
            }
            (Backing::Stored(Storage::Namespaces), _) => self.listable::<core::v1::Namespace>(),
            (Backing::Stored(Storage::Events), true) => self.listable::<events::v1::Event>(),
            (Backing::Stored(Storage::Events), false) => self.listable::<core::v1::Event>(),
            (Backing::Stored(Storage::Leases), _) => self.listable::<coordination::v1::Lease>(),
            (Backing::Stored(Storage::ServiceAccounts), _) => {
                self.listable::<core::v1::ServiceAccount>()
            }
            (Backing::Stored(Storage::ConfigMaps), _) => self.listable::<core::v1::ConfigMap>(),
            (Backing::Stored(Storage::Pods), _) => self.listable::<core::v1::Pod>(),
            (Backing::TokenReview, _) => self.single::<authentication::v1::TokenReview>(),
            (Backing::SubjectAccessReview, _) => {
                self.single::<authorization::v1::SubjectAccessReview>()
            }
        };
        self.patched.push((kinds.object.clone(), def.plural));
        kinds
    }

    /// Registers the kind of a subresource served by a handler of its own (`serviceaccounts/token`).
    pub(crate) fn subresource_kind(&mut self, kind: &str) -> Option<String> {
        match kind {
            "TokenRequest" => Some(self.single::<authentication::v1::TokenRequest>().object),
            _ => None,
        }
    }

    /// Registers the types every document's operations name: `Status`, `DeleteOptions`, `Patch`.
    pub(crate) fn common(&mut self) -> (String, String, String) {
        (
            self.define::<meta::Status>(),
            self.define::<meta::DeleteOptions>(),
            self.define::<meta::Patch>(),
        )
    }

    /// The finished definitions, sorted by name.
    pub(crate) fn finish(mut self) -> Map<String, Value> {
        let mut all = self.generator.take_definitions(true);
        all.append(&mut self.lists);
        for schema in all.values_mut() {
            drop_required_metadata(schema);
        }
        for (name, group, version, kind) in &self.kinds {
            if let Some(Value::Object(schema)) = all.get_mut(name) {
                schema.insert(
                    "x-kubernetes-group-version-kind".into(),
                    json!([{"group": group, "kind": kind, "version": version}]),
                );
            }
        }
        for (name, plural) in &self.patched {
            for (path, key) in crate::patch::schema::merged_lists(plural) {
                mark_merged_list(&mut all, name, path, key);
            }
        }
        all.sort_keys();
        all
    }
}

/// The schema of `<Kind>List`.
fn list_schema(flavor: Flavor, kind: &str, list_kind: &str, item: Value) -> Value {
    let meta_ref = flavor.reference("io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta");
    let metadata = wrap_reference(
        flavor,
        meta_ref,
        "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
    );
    json!({
        "description": format!("{list_kind} is a list of {kind} objects."),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {
                "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources",
                "type": "string"
            },
            "items": {
                "description": format!("List of {kind} objects."),
                "type": "array",
                "items": item
            },
            "kind": {
                "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
                "type": "string"
            },
            "metadata": metadata
        }
    })
}

/// A reference with a description: a sibling of `$ref` in Swagger 2.0, wrapped in `allOf` in OpenAPI 3.
fn wrap_reference(flavor: Flavor, reference: Value, description: &str) -> Value {
    match flavor {
        Flavor::V2 => {
            let mut v = reference;
            if let Value::Object(m) = &mut v {
                m.insert("description".into(), json!(description));
            }
            v
        }
        Flavor::V3 => json!({"allOf": [reference], "description": description}),
    }
}

/// k8s-openapi marks `metadata` required (its Rust types are not optional); the real API types do not.
fn drop_required_metadata(schema: &mut Value) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    if let Some(Value::Array(required)) = obj.get_mut("required") {
        required.retain(|r| r != "metadata");
        if required.is_empty() {
            obj.shift_remove("required");
        }
    }
}

/// The definition a property schema refers to (directly or through a one-element `allOf`).
fn referenced(schema: &Value) -> Option<&str> {
    let reference = schema
        .get("$ref")
        .or_else(|| schema.get("allOf")?.get(0)?.get("$ref"))?;
    reference.as_str()?.rsplit('/').next()
}

/// Adds the strategic-merge extensions to the list property at `path` below the definition `root`,
/// following references (and the item schema of lists along the way).
fn mark_merged_list(all: &mut Map<String, Value>, root: &str, path: &[&str], key: Option<&str>) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut current = root.to_string();
    for segment in parents {
        let Some(next) = all
            .get(&current)
            .and_then(|s| s.get("properties"))
            .and_then(|p| p.get(*segment))
            .and_then(|p| referenced(p.get("items").unwrap_or(p)))
        else {
            return;
        };
        current = next.to_string();
    }
    let Some(property) = all
        .get_mut(&current)
        .and_then(|s| s.get_mut("properties"))
        .and_then(|p| p.get_mut(*last))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    if let Some(key) = key {
        property.insert("x-kubernetes-patch-merge-key".into(), json!(key));
    }
    property.insert("x-kubernetes-patch-strategy".into(), json!("merge"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::find;

    #[test]
    fn node_definitions() {
        let mut defs = Definitions::new(Flavor::V3);
        let nodes = defs.resource(find("", "v1", "nodes").unwrap());
        assert_eq!(nodes.object, "io.k8s.api.core.v1.Node");
        assert_eq!(nodes.list.as_deref(), Some("io.k8s.api.core.v1.NodeList"));
        let all = defs.finish();
        let node = &all["io.k8s.api.core.v1.Node"];
        assert_eq!(
            node["x-kubernetes-group-version-kind"],
            json!([{"group": "", "kind": "Node", "version": "v1"}])
        );
        assert!(node.get("required").is_none());
        assert_eq!(
            node["properties"]["spec"]["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.NodeSpec"
        );
        let addresses = &all["io.k8s.api.core.v1.NodeStatus"]["properties"]["addresses"];
        assert_eq!(addresses["x-kubernetes-patch-merge-key"], "type");
        assert_eq!(addresses["x-kubernetes-patch-strategy"], "merge");
        let finalizers =
            &all["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"]["finalizers"];
        assert_eq!(finalizers["x-kubernetes-patch-strategy"], "merge");
        let list = &all["io.k8s.api.core.v1.NodeList"];
        assert_eq!(
            list["properties"]["items"]["items"]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.Node"
        );
        assert!(all.contains_key("io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"));
    }

    #[test]
    fn pod_container_lists_merge_by_name() {
        let mut defs = Definitions::new(Flavor::V2);
        defs.resource(find("", "v1", "pods").unwrap());
        let all = defs.finish();
        let spec = &all["io.k8s.api.core.v1.PodSpec"]["properties"];
        assert_eq!(spec["containers"]["x-kubernetes-patch-merge-key"], "name");
        let container = &all["io.k8s.api.core.v1.Container"]["properties"];
        assert_eq!(container["env"]["x-kubernetes-patch-merge-key"], "name");
        assert_eq!(
            all["io.k8s.api.core.v1.Pod"]["properties"]["spec"]["$ref"],
            "#/definitions/io.k8s.api.core.v1.PodSpec"
        );
    }
}
