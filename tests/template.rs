//! template.yaml, offline: cfn-lint is clean, the SAM translation succeeds,
//! and the translated template has the properties operators rely on.
//! Needs `cfn-lint` and `aws-sam-translator` (make test installs them); fails
//! without them. tests/template_sources.rs uses its translation too.

mod modes;
mod operations;
mod pass;
mod permissions;
mod resources;

use std::process::Command;

use serde_json::Value;

pub(crate) fn root() -> &'static str {
    env!("CARGO_MANIFEST_DIR")
}

pub(crate) struct Templates {
    pub(crate) source: Value,
    pub(crate) out: Value,
}

/// The template as SAM translates it, its conditions decided for the
/// parameters' defaults.
fn templates() -> Templates {
    templates_with(&[])
}

/// The template as SAM translates it with `params` (the rest at their
/// defaults), and then as CloudFormation would create it with them: every
/// `Fn::If` decided, `AWS::NoValue` dropped, and resources whose condition
/// is false gone.
pub(crate) fn templates_with(params: &[(&str, &str)]) -> Templates {
    let o = Command::new("python3")
        .arg(format!("{}/scripts/translate_template.py", root()))
        .arg(format!("{}/template.yaml", root()))
        .args(params.iter().map(|(k, v)| format!("{k}={v}")))
        .output()
        .expect("python3 runs");
    crate::common::assert_ran(
        &o,
        "the SAM translation failed (is aws-sam-translator installed?)",
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut out = v["translated"].clone();
    let values = Conditions::new(&out, params);
    let resources = out["Resources"].as_object_mut().unwrap();
    resources.retain(|_, r| r["Condition"].as_str().is_none_or(|c| values.condition(c)));
    let out = values.decide(&out).unwrap_or(Value::Null);
    Templates {
        source: v["source"].clone(),
        out,
    }
}

/// A template's parameters and conditions, for one set of values.
struct Conditions {
    params: serde_json::Map<String, Value>,
    conditions: Value,
}

impl Conditions {
    fn new(template: &Value, given: &[(&str, &str)]) -> Self {
        let mut params = serde_json::Map::new();
        for (name, p) in template["Parameters"].as_object().unwrap() {
            if let Some(d) = p.get("Default") {
                let d = d.as_str().map_or_else(|| d.to_string(), str::to_owned);
                params.insert(name.clone(), Value::String(d));
            }
        }
        for (k, v) in given {
            assert!(template["Parameters"][*k].is_object(), "no parameter {k}");
            params.insert((*k).to_owned(), Value::String((*v).to_owned()));
        }
        Conditions {
            params,
            conditions: template["Conditions"].clone(),
        }
    }

    /// A parameter reference or a literal, as a string.
    fn value(&self, v: &Value) -> String {
        match v.get("Ref").and_then(Value::as_str) {
            Some(p) => self.params[p].as_str().unwrap().to_owned(),
            None => v.as_str().map_or_else(|| v.to_string(), str::to_owned),
        }
    }

    fn holds(&self, c: &Value) -> bool {
        if let Some(name) = c.get("Condition").and_then(Value::as_str) {
            return self.condition(name);
        }
        let (op, args) = c.as_object().unwrap().iter().next().unwrap();
        let args = args.as_array().unwrap();
        match op.as_str() {
            "Fn::Equals" => self.value(&args[0]) == self.value(&args[1]),
            "Fn::Not" => !self.holds(&args[0]),
            "Fn::And" => args.iter().all(|a| self.holds(a)),
            "Fn::Or" => args.iter().any(|a| self.holds(a)),
            other => panic!("condition function {other}"),
        }
    }

    fn condition(&self, name: &str) -> bool {
        self.holds(&self.conditions[name])
    }

    /// `v` with every `Fn::If` decided; `None` for `AWS::NoValue`.
    fn decide(&self, v: &Value) -> Option<Value> {
        match v {
            Value::Object(o) if o.len() == 1 && o.contains_key("Fn::If") => {
                let args = o["Fn::If"].as_array().unwrap();
                let pick = if self.condition(args[0].as_str().unwrap()) {
                    &args[1]
                } else {
                    &args[2]
                };
                self.decide(pick)
            }
            Value::Object(o)
                if o.len() == 1 && o.get("Ref") == Some(&Value::from("AWS::NoValue")) =>
            {
                None
            }
            Value::Object(o) => Some(Value::Object(
                o.iter()
                    .filter_map(|(k, v)| self.decide(v).map(|v| (k.clone(), v)))
                    .collect(),
            )),
            Value::Array(a) => Some(Value::Array(
                a.iter().filter_map(|v| self.decide(v)).collect(),
            )),
            other => Some(other.clone()),
        }
    }
}

impl Templates {
    pub(crate) fn res(&self, name: &str) -> &Value {
        let r = &self.out["Resources"][name];
        assert!(r.is_object(), "no resource {name}");
        r
    }

    pub(crate) fn of_type(&self, ty: &str) -> Vec<(&String, &Value)> {
        self.out["Resources"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, r)| r["Type"] == ty)
            .collect()
    }

    fn param_default(&self, name: &str) -> &Value {
        &self.out["Parameters"][name]["Default"]
    }

    /// The parameter `name` is `default` unless given, and may only be one
    /// of `allowed`.
    fn assert_choice(&self, name: &str, default: &str, allowed: &[&str]) {
        assert_eq!(self.param_default(name), default, "{name}");
        let values = &self.out["Parameters"][name]["AllowedValues"];
        assert_eq!(values, &serde_json::json!(allowed), "{name}");
    }

    pub(crate) fn role_statements(&self, role: &str) -> Vec<Value> {
        self.res(role)["Properties"]["Policies"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| p["PolicyDocument"]["Statement"].as_array().unwrap().clone())
            .collect()
    }

    /// The statements of `role` naming a resource that `on` holds for.
    pub(crate) fn statements_on(&self, role: &str, on: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut statements = self.role_statements(role);
        statements.retain(|s| as_list(&s["Resource"]).iter().any(&on));
        statements
    }

    /// The actions `role`'s statements grant on the queue `queue`.
    pub(crate) fn queue_actions(&self, role: &str, queue: &str) -> Vec<String> {
        self.statements_on(role, |r| r["Fn::GetAtt"][0] == queue)
            .iter()
            .flat_map(|s| as_list(&s["Action"]))
            .map(|a| a.as_str().unwrap().to_owned())
            .collect()
    }

    /// The properties of `queue`, after what every queue of ours holds to:
    /// encrypted, redriven to `dead_letters` (encrypted, keeping messages
    /// longer), and hidden while taken for at least six of the sweep
    /// function's timeouts. With that timeout.
    pub(crate) fn queue_with_dead_letters(&self, queue: &str, dead_letters: &str) -> (&Value, u64) {
        let q = &self.res(queue)["Properties"];
        assert_eq!(q["SqsManagedSseEnabled"], true, "{queue}");
        assert_eq!(
            q["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0],
            dead_letters
        );
        let dlq = &self.res(dead_letters)["Properties"];
        assert_eq!(dlq["SqsManagedSseEnabled"], true, "{dead_letters}");
        let retention = |p: &Value| p["MessageRetentionPeriod"].as_u64().unwrap();
        assert!(retention(dlq) > retention(q), "{dead_letters}");
        let timeout = self.res("SweepFunction")["Properties"]["Timeout"].as_u64();
        let timeout = timeout.unwrap();
        assert!(q["VisibilityTimeout"].as_u64().unwrap() >= 6 * timeout);
        (q, timeout)
    }
}

pub(crate) fn as_list(v: &Value) -> Vec<Value> {
    match v {
        Value::Array(a) => a.clone(),
        other => vec![other.clone()],
    }
}

pub(crate) fn sub(v: &Value) -> String {
    v["Fn::Sub"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| v.to_string())
}

#[test]
fn cfn_lint_is_clean() {
    let o = Command::new("cfn-lint")
        .arg(format!("{}/template.yaml", root()))
        .output()
        .expect("cfn-lint is installed (make test installs it)");
    assert_lint_clean(&o);
}

/// cfn-lint's run `o` found nothing.
fn assert_lint_clean(o: &std::process::Output) {
    crate::common::assert_ran(o, "cfn-lint");
}

/// The actions a role's statements grant on the due queue.
fn due_queue_actions(t: &Templates, role: &str) -> Vec<String> {
    t.queue_actions(role, "DueQueue")
}
