//! The paths of the OpenAPI documents: one operation per verb each served resource allows, on the
//! collection, the object and its subresources, with the query parameters the server reads (among them
//! `fieldValidation`, which is how kubectl learns that the server validates fields itself), named and
//! tagged as the real server names them (`listCoreV1Node`, `patchCoreV1NamespacedServiceStatus`, ...).

use serde_json::{Map, Value, json};

use super::schemas::{Definitions, Flavor, KindSchemas};
use crate::resources::{ResourceDef, SubresourceDef};
use crate::strategy;

/// The type of a parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ParamType {
    String,
    Boolean,
    Integer,
}

impl ParamType {
    fn name(self) -> &'static str {
        match self {
            ParamType::String => "string",
            ParamType::Boolean => "boolean",
            ParamType::Integer => "integer",
        }
    }
}

/// A query or path parameter.
#[derive(Debug, Clone, Copy)]
struct Param {
    name: &'static str,
    location: &'static str,
    ty: ParamType,
    description: &'static str,
}

const fn query(name: &'static str, ty: ParamType, description: &'static str) -> Param {
    Param {
        name,
        location: "query",
        ty,
        description,
    }
}

const PRETTY: Param = query(
    "pretty",
    ParamType::String,
    "If 'true', then the output is pretty printed.",
);
const DRY_RUN: Param = query(
    "dryRun",
    ParamType::String,
    "When present, indicates that modifications should not be persisted. The only valid value is All.",
);
const FIELD_MANAGER: Param = query(
    "fieldManager",
    ParamType::String,
    "A name associated with the actor or entity that is making these changes.",
);
const FIELD_VALIDATION: Param = query(
    "fieldValidation",
    ParamType::String,
    "How the server handles unknown fields in the request object: Ignore drops them silently, Warn (the default) drops them with a warning header per field, Strict fails the request with a BadRequest naming them.",
);
const FORCE: Param = query(
    "force",
    ParamType::Boolean,
    "Force is going to \"force\" Apply requests. It must be unset for non-apply patch requests.",
);
const LIST_PARAMS: &[Param] = &[
    query(
        "allowWatchBookmarks",
        ParamType::Boolean,
        "Requests watch events with type BOOKMARK.",
    ),
    query(
        "continue",
        ParamType::String,
        "The continue token of the previous page of a paged list.",
    ),
    query(
        "fieldSelector",
        ParamType::String,
        "A selector to restrict the list of returned objects by their fields. Defaults to everything.",
    ),
    query(
        "labelSelector",
        ParamType::String,
        "A selector to restrict the list of returned objects by their labels. Defaults to everything.",
    ),
    query(
        "limit",
        ParamType::Integer,
        "The maximum number of objects to return for a list call; more are returned with a continue token.",
    ),
    query(
        "resourceVersion",
        ParamType::String,
        "Constrains which resource versions the request may be served from.",
    ),
    query(
        "resourceVersionMatch",
        ParamType::String,
        "How resourceVersion is applied to list calls: Exact or NotOlderThan.",
    ),
    query(
        "sendInitialEvents",
        ParamType::Boolean,
        "With watch=true, starts the watch with synthetic events for the current objects, ended by a bookmark.",
    ),
    query(
        "timeoutSeconds",
        ParamType::Integer,
        "Timeout for the list/watch call, regardless of any activity or inactivity.",
    ),
    query(
        "watch",
        ParamType::Boolean,
        "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications.",
    ),
];
const DELETE_PARAMS: &[Param] = &[
    DRY_RUN,
    query(
        "gracePeriodSeconds",
        ParamType::Integer,
        "The duration in seconds before the object should be deleted.",
    ),
    query(
        "orphanDependents",
        ParamType::Boolean,
        "Deprecated: please use the PropagationPolicy.",
    ),
    query(
        "propagationPolicy",
        ParamType::String,
        "Whether and how garbage collection will be performed: Orphan, Background or Foreground.",
    ),
];

/// One operation of a path.
struct Operation {
    method: &'static str,
    /// `x-kubernetes-action`.
    action: &'static str,
    operation_id: String,
    description: String,
    params: Vec<Param>,
    /// The definition of the request body, if any.
    body: Option<String>,
    /// Whether the body is a patch (its content types are the patch types).
    patch: bool,
    /// The definition answered, and the status codes answering it.
    response: String,
    codes: &'static [u16],
    /// (group, version, kind) of the operation's objects.
    gvk: (&'static str, &'static str, String),
}

/// One path and its operations.
struct PathItem {
    path: String,
    params: Vec<Param>,
    operations: Vec<Operation>,
}

/// The definitions every operation list names.
struct Common {
    status: String,
    delete_options: String,
    patch: String,
}

/// `CoreV1`, `CoordinationV1`, `RbacAuthorizationV1`: the group-version part of operation ids.
fn group_version_id(group: &str, version: &str) -> String {
    let group = if group.is_empty() {
        "core"
    } else {
        group.strip_suffix(".k8s.io").unwrap_or(group)
    };
    let mut out = String::new();
    for part in group.split('.').chain(std::iter::once(version)) {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            out.extend(first.to_uppercase());
            out.push_str(chars.as_str());
        }
    }
    out
}

/// `core_v1`, `coordination_v1`: the tag of a group version's operations.
fn tag(group: &str, version: &str) -> String {
    let group = if group.is_empty() {
        "core"
    } else {
        group.strip_suffix(".k8s.io").unwrap_or(group)
    };
    format!("{}_{version}", group.replace('.', "_"))
}

fn path_param(name: &'static str, description: &'static str) -> Param {
    Param {
        name,
        location: "path",
        ty: ParamType::String,
        description,
    }
}

/// The operations of one resource: on its collection, its objects, their status and their other
/// subresources, and (for namespaced resources) the list across namespaces.
struct ResourcePaths<'a> {
    def: &'static ResourceDef,
    kinds: &'a KindSchemas,
    common: &'a Common,
}

impl ResourcePaths<'_> {
    fn prefix(&self) -> String {
        if self.def.group.is_empty() {
            format!("/api/{}", self.def.version)
        } else {
            format!("/apis/{}/{}", self.def.group, self.def.version)
        }
    }

    fn scope_path(&self) -> String {
        if self.def.namespaced {
            format!(
                "{}/namespaces/{{namespace}}/{}",
                self.prefix(),
                self.def.plural
            )
        } else {
            format!("{}/{}", self.prefix(), self.def.plural)
        }
    }

    fn scope_params(&self) -> Vec<Param> {
        let mut params = Vec::new();
        if self.def.namespaced {
            params.push(path_param(
                "namespace",
                "object name and auth scope, such as for teams and projects",
            ));
        }
        params.push(PRETTY);
        params
    }

    fn gvk(&self) -> (&'static str, &'static str, String) {
        (self.def.group, self.def.version, self.def.kind.to_string())
    }

    /// `listCoreV1NamespacedService` and its siblings.
    fn id(&self, verb: &str, suffix: &str) -> String {
        let scope = if self.def.namespaced {
            "Namespaced"
        } else {
            ""
        };
        format!(
            "{verb}{}{scope}{}{suffix}",
            group_version_id(self.def.group, self.def.version),
            self.def.kind
        )
    }

    fn op(
        &self,
        method: &'static str,
        action: &'static str,
        operation_id: String,
        description: String,
    ) -> Operation {
        Operation {
            method,
            action,
            operation_id,
            description,
            params: Vec::new(),
            body: None,
            patch: false,
            response: self.kinds.object.clone(),
            codes: &[200],
            gvk: self.gvk(),
        }
    }

    fn collection(&self) -> Option<PathItem> {
        let def = self.def;
        let kind = def.kind;
        let mut operations = Vec::new();
        if def.allows("list")
            && let Some(list) = &self.kinds.list
        {
            let mut op = self.op(
                "get",
                "list",
                self.id("list", ""),
                format!("list or watch objects of kind {kind}"),
            );
            op.params = LIST_PARAMS.to_vec();
            op.response = list.clone();
            operations.push(op);
        }
        if def.allows("create") {
            let mut op = self.op(
                "post",
                "post",
                self.id("create", ""),
                format!("create a {kind}"),
            );
            op.params = vec![DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION];
            op.body = Some(self.kinds.object.clone());
            op.codes = &[200, 201, 202];
            operations.push(op);
        }
        if def.allows("deletecollection") {
            let mut op = self.op(
                "delete",
                "deletecollection",
                format!(
                    "delete{}Collection{}{}",
                    group_version_id(def.group, def.version),
                    if def.namespaced { "Namespaced" } else { "" },
                    kind
                ),
                format!("delete collection of {kind}"),
            );
            op.params = DELETE_PARAMS.iter().chain(LIST_PARAMS).copied().collect();
            op.body = Some(self.common.delete_options.clone());
            op.response = self.common.status.clone();
            operations.push(op);
        }
        (!operations.is_empty()).then(|| PathItem {
            path: self.scope_path(),
            params: self.scope_params(),
            operations,
        })
    }

    fn object(&self) -> Option<PathItem> {
        let def = self.def;
        let kind = def.kind;
        let mut operations = Vec::new();
        if def.allows("get") {
            operations.push(self.op(
                "get",
                "get",
                self.id("read", ""),
                format!("read the specified {kind}"),
            ));
        }
        if def.allows("update") {
            let mut op = self.op(
                "put",
                "put",
                self.id("replace", ""),
                format!("replace the specified {kind}"),
            );
            op.params = vec![DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION];
            op.body = Some(self.kinds.object.clone());
            op.codes = &[200, 201];
            operations.push(op);
        }
        if def.allows("delete") {
            let mut op = self.op(
                "delete",
                "delete",
                self.id("delete", ""),
                format!("delete a {kind}"),
            );
            op.params = DELETE_PARAMS.to_vec();
            op.body = Some(self.common.delete_options.clone());
            op.codes = &[200, 202];
            let returns_object = def
                .storage()
                .is_some_and(|s| strategy::behaviour(s).return_deleted_object);
            if !returns_object {
                op.response = self.common.status.clone();
            }
            operations.push(op);
        }
        if def.allows("patch") {
            operations.push(self.patch_op(
                self.id("patch", ""),
                format!("partially update the specified {kind}"),
            ));
        }
        (!operations.is_empty())
            .then(|| self.object_path(""))
            .map(|mut item| {
                item.operations = operations;
                item
            })
    }

    fn patch_op(&self, operation_id: String, description: String) -> Operation {
        let mut op = self.op("patch", "patch", operation_id, description);
        op.params = vec![DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION, FORCE];
        op.body = Some(self.common.patch.clone());
        op.patch = true;
        op.codes = &[200, 201];
        op
    }

    fn object_path(&self, subresource: &str) -> PathItem {
        let mut params = vec![path_param("name", "name of the object")];
        params.extend(self.scope_params());
        PathItem {
            path: format!("{}/{{name}}{subresource}", self.scope_path()),
            params,
            operations: Vec::new(),
        }
    }

    fn status(&self) -> Option<PathItem> {
        let def = self.def;
        if !def.status_subresource {
            return None;
        }
        let kind = def.kind;
        let mut item = self.object_path("/status");
        item.operations.push(self.op(
            "get",
            "get",
            self.id("read", "Status"),
            format!("read status of the specified {kind}"),
        ));
        let mut put = self.op(
            "put",
            "put",
            self.id("replace", "Status"),
            format!("replace status of the specified {kind}"),
        );
        put.params = vec![DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION];
        put.body = Some(self.kinds.object.clone());
        put.codes = &[200, 201];
        item.operations.push(put);
        item.operations.push(self.patch_op(
            self.id("patch", "Status"),
            format!("partially update status of the specified {kind}"),
        ));
        Some(item)
    }

    fn subresource(&self, sub: &'static SubresourceDef, kind_schema: String) -> PathItem {
        let mut item = self.object_path(&format!("/{}", sub.name));
        let mut op = self.op(
            "post",
            "post",
            self.id(
                "create",
                sub.kind.strip_suffix("Request").unwrap_or(sub.kind),
            ),
            format!("create {} of a {}", sub.kind, self.def.kind),
        );
        op.params = vec![DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION];
        op.body = Some(kind_schema.clone());
        op.response = kind_schema;
        op.codes = &[200, 201, 202];
        op.gvk = (sub.group, sub.version, sub.kind.to_string());
        item.operations.push(op);
        item
    }

    fn all_namespaces(&self) -> Option<PathItem> {
        let def = self.def;
        let list = self.kinds.list.as_ref()?;
        if !def.namespaced || !def.allows("list") {
            return None;
        }
        let mut op = self.op(
            "get",
            "list",
            format!(
                "list{}{}ForAllNamespaces",
                group_version_id(def.group, def.version),
                def.kind
            ),
            format!("list or watch objects of kind {}", def.kind),
        );
        op.params = LIST_PARAMS.to_vec();
        op.response = list.clone();
        Some(PathItem {
            path: format!("{}/{}", self.prefix(), def.plural),
            params: vec![PRETTY],
            operations: vec![op],
        })
    }
}

fn items_of(defs: &mut Definitions, def: &'static ResourceDef, common: &Common) -> Vec<PathItem> {
    let kinds = defs.resource(def);
    let paths = ResourcePaths {
        def,
        kinds: &kinds,
        common,
    };
    let mut items: Vec<PathItem> = [
        paths.collection(),
        paths.object(),
        paths.status(),
        paths.all_namespaces(),
    ]
    .into_iter()
    .flatten()
    .collect();
    for sub in def.subresources {
        if let Some(schema) = defs.subresource_kind(sub.kind) {
            items.push(paths.subresource(sub, schema));
        }
    }
    items
}

fn param_json(flavor: Flavor, p: &Param) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), json!(p.name));
    m.insert("in".into(), json!(p.location));
    m.insert("description".into(), json!(p.description));
    if p.location == "path" {
        m.insert("required".into(), json!(true));
    }
    let schema = json!({"type": p.ty.name(), "uniqueItems": true});
    match flavor {
        Flavor::V3 => {
            m.insert("schema".into(), schema);
        }
        Flavor::V2 => {
            if let Value::Object(s) = schema {
                m.extend(s);
            }
        }
    }
    Value::Object(m)
}

const PATCH_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];

fn code_description(code: u16) -> &'static str {
    match code {
        201 => "Created",
        202 => "Accepted",
        _ => "OK",
    }
}

fn operation_json(flavor: Flavor, op: &Operation, tag: &str) -> Value {
    let mut m = Map::new();
    m.insert("tags".into(), json!([tag]));
    m.insert("description".into(), json!(op.description));
    if flavor == Flavor::V2 {
        let consumes: &[&str] = if op.patch { PATCH_TYPES } else { &["*/*"] };
        m.insert("consumes".into(), json!(consumes));
        m.insert("produces".into(), json!(["application/json"]));
        m.insert("schemes".into(), json!(["https"]));
    }
    m.insert("operationId".into(), json!(op.operation_id));
    let mut params: Vec<Value> = Vec::new();
    if flavor == Flavor::V2
        && let Some(body) = &op.body
    {
        params.push(json!({"name": "body", "in": "body", "required": !op.action.starts_with("delete"), "schema": flavor.reference(body)}));
    }
    params.extend(op.params.iter().map(|p| param_json(flavor, p)));
    if !params.is_empty() {
        m.insert("parameters".into(), Value::Array(params));
    }
    if flavor == Flavor::V3
        && let Some(body) = &op.body
    {
        let types: &[&str] = if op.patch { PATCH_TYPES } else { &["*/*"] };
        let content: Map<String, Value> = types
            .iter()
            .map(|t| ((*t).to_string(), json!({"schema": flavor.reference(body)})))
            .collect();
        let mut request = Map::new();
        request.insert("content".into(), Value::Object(content));
        if !op.action.starts_with("delete") {
            request.insert("required".into(), json!(true));
        }
        m.insert("requestBody".into(), Value::Object(request));
    }
    let mut responses = Map::new();
    for code in op.codes {
        let schema = flavor.reference(&op.response);
        let response = match flavor {
            Flavor::V2 => json!({"description": code_description(*code), "schema": schema}),
            Flavor::V3 => {
                json!({"description": code_description(*code), "content": {"application/json": {"schema": schema}}})
            }
        };
        responses.insert(code.to_string(), response);
    }
    responses.insert("401".into(), json!({"description": "Unauthorized"}));
    m.insert("responses".into(), Value::Object(responses));
    m.insert("x-kubernetes-action".into(), json!(op.action));
    let (group, version, kind) = &op.gvk;
    m.insert(
        "x-kubernetes-group-version-kind".into(),
        json!({"group": group, "kind": kind, "version": version}),
    );
    Value::Object(m)
}

/// The `paths` object of the operations on `defs_served` (one group version, or all of them), adding
/// the definitions they name to `defs`.
pub(crate) fn paths(
    flavor: Flavor,
    defs: &mut Definitions,
    served: &[&'static ResourceDef],
) -> Map<String, Value> {
    let (status, delete_options, patch) = defs.common();
    let common = Common {
        status,
        delete_options,
        patch,
    };
    let mut out = Map::new();
    for def in served {
        let tag = tag(def.group, def.version);
        for item in items_of(defs, def, &common) {
            let mut m = Map::new();
            for op in &item.operations {
                m.insert(op.method.into(), operation_json(flavor, op, &tag));
            }
            m.insert(
                "parameters".into(),
                Value::Array(item.params.iter().map(|p| param_json(flavor, p)).collect()),
            );
            out.insert(item.path, Value::Object(m));
        }
    }
    out.sort_keys();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{find, in_group_version};

    #[test]
    fn ids_and_tags() {
        assert_eq!(group_version_id("", "v1"), "CoreV1");
        assert_eq!(
            group_version_id("coordination.k8s.io", "v1"),
            "CoordinationV1"
        );
        assert_eq!(
            group_version_id("rbac.authorization.k8s.io", "v1"),
            "RbacAuthorizationV1"
        );
        assert_eq!(tag("events.k8s.io", "v1"), "events_v1");
        assert_eq!(tag("", "v1"), "core_v1");
    }

    #[test]
    fn node_and_service_operations() {
        let mut defs = Definitions::new(Flavor::V3);
        let served = in_group_version("", "v1");
        let p = paths(Flavor::V3, &mut defs, &served);
        let patch = &p["/api/v1/nodes/{name}"]["patch"];
        assert_eq!(patch["operationId"], "patchCoreV1Node");
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            json!({"group": "", "kind": "Node", "version": "v1"})
        );
        let names: Vec<&str> = patch["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"fieldValidation"));
        assert_eq!(
            p["/api/v1/namespaces/{namespace}/services/{name}/status"]["patch"]["operationId"],
            "patchCoreV1NamespacedServiceStatus"
        );
        assert_eq!(
            p["/api/v1/services"]["get"]["operationId"],
            "listCoreV1ServiceForAllNamespaces"
        );
        assert_eq!(
            p["/api/v1/pods"]["get"]["operationId"],
            "listCoreV1PodForAllNamespaces"
        );
        assert_eq!(
            p["/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"]["post"]["x-kubernetes-group-version-kind"]
                ["kind"],
            "TokenRequest"
        );
        assert_eq!(
            p["/api/v1/nodes/{name}"]["delete"]["responses"]["200"]["content"]["application/json"]
                ["schema"]["$ref"],
            "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Status"
        );
        assert!(p.get("/api/v1/namespaces/{namespace}/namespaces").is_none());
    }

    #[test]
    fn review_has_only_create() {
        let mut defs = Definitions::new(Flavor::V2);
        let review = find("authentication.k8s.io", "v1", "tokenreviews").unwrap();
        let p = paths(Flavor::V2, &mut defs, &[review]);
        let keys: Vec<&String> = p.keys().collect();
        assert_eq!(keys, ["/apis/authentication.k8s.io/v1/tokenreviews"]);
        let post = &p["/apis/authentication.k8s.io/v1/tokenreviews"]["post"];
        assert_eq!(post["operationId"], "createAuthenticationV1TokenReview");
        assert_eq!(post["parameters"][0]["in"], "body");
    }
}
