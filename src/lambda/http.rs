//! API Gateway REST (payload 1.0), HTTP API (2.0) and function URL events,
//! read into one [`HttpRequest`], and the one answer shape all three take,
//! [`HttpResponse`]. The routes are src/lambda/routes.rs's.
//!
//! Requests are read with a lenient struct of our own rather than the typed
//! `aws_lambda_events` requests: one struct reads all three shapes, and odd
//! values (a method outside the standard set, non-string JWT claims, null
//! headers) become a clear 4xx instead of a deserialization failure.

use std::borrow::Cow;
use std::time::Duration;

use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::intake::Problem;
use crate::intake::problem::ACCEPT_POST;
use crate::protocol::names::Principal;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct RawHttp {
    version: Option<String>,
    http_method: Option<String>,
    path: Option<String>,
    raw_path: Option<String>,
    headers: Option<Map<String, Value>>,
    body: Option<String>,
    is_base64_encoded: bool,
    request_context: Value,
    /// Payload 2.0 and function URLs: the query as sent, still encoded.
    raw_query_string: Option<String>,
    /// Payload 1.0: the query's values, decoded by API Gateway (all of a
    /// repeated name's).
    multi_value_query_string_parameters: Option<Map<String, Value>>,
    query_string_parameters: Option<Map<String, Value>>,
    /// The route's path variables, decoded by API Gateway (none through a
    /// function URL).
    path_parameters: Option<Map<String, Value>>,
}

/// One HTTP request, whatever shape it came in.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpRequest {
    /// The HTTP method, upper-case.
    pub method: String,
    /// The path the routes match, without a REST API's stage.
    pub path: String,
    /// The path as the caller addressed it: a REST API's includes its stage
    /// (`requestContext.path`), an HTTP API's raw path does already.
    pub public_path: String,
    /// A REST API's stage, if any.
    pub stage: Option<String>,
    /// Lower-case names.
    pub headers: Vec<(String, String)>,
    /// The raw body text and whether it is base64.
    pub body: Option<String>,
    /// Whether `body` is base64.
    pub base64: bool,
    /// The invocation's request id.
    pub request_id: String,
    /// The authenticated caller, in an injective text form.
    pub principal: Option<Principal>,
    /// Payload 2.0 (HTTP API, function URL): its response may carry
    /// `cookies`; a REST API's (1.0) must not.
    pub v2: bool,
    /// The query's parameters, decoded, in order (a repeated name repeats).
    pub query: Vec<(String, String)>,
    /// The route's path variables as API Gateway decoded them; empty
    /// through a function URL, whose path is as the caller sent it.
    pub path_params: Vec<(String, String)>,
}

impl HttpRequest {
    /// Is this event an HTTP request?
    pub fn looks_like(event: &Value) -> bool {
        event.get("httpMethod").is_some()
            || event.pointer("/requestContext/http").is_some()
            || event.get("rawPath").is_some()
    }

    /// Reads an API Gateway (REST or HTTP API) or function URL event.
    pub fn from_event(event: Value) -> Result<Self, Problem> {
        let raw: RawHttp = serde_json::from_value(event)
            .map_err(|e| Problem::invalid(format!("malformed HTTP event: {e}")))?;
        let ctx = &raw.request_context;
        let str_at = |p: &str| ctx.pointer(p).and_then(Value::as_str).map(str::to_owned);
        let v2 = raw.version.as_deref() == Some("2.0") || ctx.get("http").is_some();
        let method = if v2 {
            str_at("/http/method")
        } else {
            raw.http_method.clone()
        };
        let path = if v2 {
            raw.raw_path.clone().or_else(|| str_at("/http/path"))
        } else {
            raw.path.clone()
        };
        let headers = raw
            .headers
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(k, v)| v.as_str().map(|v| (k.to_ascii_lowercase(), v.to_owned())))
            .collect();
        let query = query_of(
            raw.raw_query_string.as_deref(),
            raw.multi_value_query_string_parameters.as_ref(),
            raw.query_string_parameters.as_ref(),
        )?;
        let path_params = raw
            .path_parameters
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(k, v)| v.as_str().map(|v| (k, v.to_owned())))
            .collect();
        let path = path.unwrap_or_else(|| "/".into());
        let public_path = if v2 {
            path.clone()
        } else {
            str_at("/path").unwrap_or_else(|| path.clone())
        };
        Ok(HttpRequest {
            method: method.unwrap_or_default().to_ascii_uppercase(),
            path,
            public_path,
            stage: str_at("/stage"),
            headers,
            body: raw.body,
            base64: raw.is_base64_encoded,
            request_id: str_at("/requestId").unwrap_or_default(),
            principal: principal(ctx),
            v2,
            query,
            path_params,
        })
    }

    /// The one value of the query parameter `name`: `None` when it is
    /// absent, an error when it is given more than once.
    pub fn query_one(&self, name: &str) -> Result<Option<&str>, Problem> {
        let mut found = self.query.iter().filter(|(k, _)| k == name);
        let first = found.next().map(|(_, v)| v.as_str());
        if found.next().is_some() {
            return Err(Problem::invalid(format!(
                "the query parameter {name} is given more than once"
            )));
        }
        Ok(first)
    }

    /// The route's path variable `name`, as API Gateway decoded it.
    pub fn path_param(&self, name: &str) -> Option<&str> {
        self.path_params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The header `name` (lower-case), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body's bytes: the text itself, unless it is base64 (an input may
    /// be most of the body, and it is parsed from here, never copied first).
    fn body_bytes(&self) -> Result<Cow<'_, [u8]>, Problem> {
        match (&self.body, self.base64) {
            (None, _) => Ok(Cow::Borrowed(&[])),
            (Some(b), false) => Ok(Cow::Borrowed(b.as_bytes())),
            (Some(b), true) => base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .map(Cow::Owned)
                .map_err(|e| Problem::invalid(format!("body: invalid base64: {e}"))),
        }
    }

    /// A POST's body must be JSON: a `Content-Type` that says otherwise is
    /// refused (415) before the body is read; none at all is taken as JSON.
    pub(super) fn require_json(&self) -> Result<(), Problem> {
        match self.header("content-type") {
            Some(ct) if !is_json(ct) => Err(Problem::unsupported_media_type(ct)),
            _ => Ok(()),
        }
    }

    /// The body's bytes, when there are at most `max` of them; else
    /// `too_large()`. A base64 body far over is refused before it is
    /// decoded (`max` bytes take at most `max * 4 / 3 + 4` characters).
    pub(super) fn body_within(
        &self,
        max: usize,
        too_large: impl Fn() -> Problem,
    ) -> Result<Cow<'_, [u8]>, Problem> {
        if self
            .body
            .as_ref()
            .is_some_and(|b| b.len() > max * 4 / 3 + 4)
        {
            return Err(too_large());
        }
        let bytes = self.body_bytes()?;
        if bytes.len() > max {
            return Err(too_large());
        }
        Ok(bytes)
    }
}

/// The query's parameters: from the raw query where the event has one
/// (payload 2.0 and function URLs pass it as sent, so it is decoded here,
/// once), else from payload 1.0's decoded values.
fn query_of(
    raw: Option<&str>,
    multi: Option<&Map<String, Value>>,
    single: Option<&Map<String, Value>>,
) -> Result<Vec<(String, String)>, Problem> {
    if let Some(raw) = raw {
        return raw
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                let decode = |s: &str| {
                    percent_decode(&s.replace('+', " ")).ok_or_else(|| {
                        Problem::invalid("the query string is not valid percent-encoded UTF-8")
                    })
                };
                Ok((decode(k)?, decode(v)?))
            })
            .collect();
    }
    let mut out = Vec::new();
    if let Some(multi) = multi {
        for (k, vs) in multi {
            for v in vs
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                out.push((k.clone(), v.to_owned()));
            }
        }
    } else if let Some(single) = single {
        for (k, v) in single {
            if let Some(v) = v.as_str() {
                out.push((k.clone(), v.to_owned()));
            }
        }
    }
    Ok(out)
}

/// `%XX` escapes decoded once into UTF-8; `None` for a malformed escape or
/// bytes that are not UTF-8. Nothing else is changed (a `+` in a path is a
/// plus).
pub fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The caller's principal, where API Gateway authenticated one: an IAM user
/// or role ARN, a JWT's issuer and subject (HTTP API JWT authorizer, Cognito
/// user pool authorizer), or a Lambda authorizer's principalId. Each kind is
/// tagged, and the JWT form is length-prefixed, so no two principals read
/// alike.
fn principal(ctx: &Value) -> Option<Principal> {
    let s = |p: &str| ctx.pointer(p).and_then(Value::as_str).unwrap_or("");
    if let Some(p) = Principal::iam(s("/authorizer/iam/userArn"))
        .or_else(|| Principal::iam(s("/identity/userArn")))
    {
        return Some(p);
    }
    let jwt = ["/authorizer/jwt/claims", "/authorizer/claims"]
        .iter()
        .find_map(|p| ctx.pointer(p).filter(|c| c.get("sub").is_some()));
    if let Some(claims) = jwt {
        let claim = |k: &str| claims.get(k).and_then(Value::as_str).unwrap_or("");
        if let Some(p) = Principal::jwt(claim("iss"), claim("sub")) {
            return Some(p);
        }
    }
    Principal::lambda(s("/authorizer/principalId"))
        .or_else(|| Principal::lambda(s("/authorizer/lambda/principalId")))
}

/// Parses an `Idempotency-Key` header: an RFC 8941 sf-string
/// (`"charge-ORD-123"`, with `\"` and `\\` escapes), or a bare token
/// (visible ASCII without quotes or commas).
pub fn parse_key_header(value: &str) -> Result<String, String> {
    let v = value.trim_matches([' ', '\t']);
    let Some(rest) = v.strip_prefix('"') else {
        if v.is_empty()
            || v.chars()
                .any(|c| !c.is_ascii_graphic() || c == '"' || c == ',')
        {
            return Err("must be a quoted string or a token".into());
        }
        return Ok(v.to_owned());
    };
    let mut out = String::new();
    let mut chars = rest.chars();
    loop {
        match chars.next() {
            None => return Err("unterminated string".into()),
            Some('"') => break,
            Some('\\') => match chars.next() {
                Some(c @ ('"' | '\\')) => out.push(c),
                _ => return Err("only \\\" and \\\\ may be escaped".into()),
            },
            Some(c) if (' '..='~').contains(&c) => out.push(c),
            Some(_) => return Err("only printable ASCII is allowed".into()),
        }
    }
    if !chars.as_str().is_empty() {
        return Err("trailing characters after the string".into());
    }
    Ok(out)
}

/// An HTTP answer, in the shape all three event sources accept
/// (`statusCode`, `headers`, `body`, `isBase64Encoded`; and `cookies` for
/// an HTTP API's payload format 2.0).
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpResponse {
    /// The HTTP status.
    pub status_code: u16,
    /// The headers.
    pub headers: Map<String, Value>,
    /// The body text.
    pub body: String,
    /// Whether `body` is base64.
    pub is_base64_encoded: bool,
    /// An HTTP API's cookies (none here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cookies: Option<Vec<String>>,
}

impl HttpResponse {
    /// The event's answer, as JSON.
    pub fn into_value(self) -> Value {
        // A struct of strings, numbers and JSON values always serializes.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// An HTTP response with a JSON body.
pub(super) fn response(status: u16, headers: Vec<(&str, String)>, body: &Value) -> HttpResponse {
    HttpResponse {
        status_code: status,
        headers: headers
            .into_iter()
            .map(|(k, v)| (k.to_owned(), Value::String(v)))
            .collect(),
        body: body.to_string(),
        is_base64_encoded: false,
        cookies: None,
    }
}

pub(super) fn problem_response(p: &Problem, request_id: &str) -> HttpResponse {
    let mut headers = vec![("content-type", "application/problem+json".to_owned())];
    if let Some(d) = p.retry_after {
        headers.push(("retry-after", retry_after_secs(d).to_string()));
    }
    if let Some(allow) = p.allow {
        headers.push(("allow", allow.to_owned()));
    }
    if p.status == 415 {
        headers.push(("accept-post", ACCEPT_POST.to_owned()));
    }
    response(p.status, headers, &p.body_for(request_id))
}

fn retry_after_secs(d: Duration) -> u64 {
    d.as_secs_f64().ceil().max(1.0) as u64
}

/// Is this `Content-Type` JSON (`application/json`, or any `application/*+json`)?
fn is_json(content_type: &str) -> bool {
    let mime = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn percent_escapes_are_decoded_once_into_utf8_and_nothing_else_is_touched() {
        assert_eq!(percent_decode("a%2Fb").as_deref(), Some("a/b"));
        assert_eq!(percent_decode("100%2525").as_deref(), Some("100%25"));
        assert_eq!(
            percent_decode("two%20words+x").as_deref(),
            Some("two words+x")
        );
        assert_eq!(percent_decode("caf%C3%A9").as_deref(), Some("café"));
        assert_eq!(percent_decode("café").as_deref(), Some("café"));
        for bad in ["%", "%2", "%zz", "%FF", "a%C3"] {
            assert_eq!(percent_decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_query_is_read_from_the_raw_string_where_there_is_one_else_from_the_decoded_values() {
        let raw = query_of(Some("scope=a%2Fb&x=1+2&scope&&y"), None, None).unwrap();
        assert_eq!(
            raw,
            [
                ("scope".to_owned(), "a/b".to_owned()),
                ("x".to_owned(), "1 2".to_owned()),
                ("scope".to_owned(), String::new()),
                ("y".to_owned(), String::new()),
            ]
        );
        assert!(query_of(Some("scope=%zz"), None, None).is_err());
        let multi = json!({"scope": ["a b", "c"]});
        let single = json!({"scope": "c"});
        assert_eq!(
            query_of(None, multi.as_object(), single.as_object()).unwrap(),
            [
                ("scope".to_owned(), "a b".to_owned()),
                ("scope".to_owned(), "c".to_owned())
            ]
        );
        assert_eq!(
            query_of(None, None, single.as_object()).unwrap(),
            [("scope".to_owned(), "c".to_owned())]
        );
        assert!(query_of(None, None, None).unwrap().is_empty());
    }

    #[test]
    fn key_headers_are_sf_strings_or_bare_tokens() {
        assert_eq!(
            parse_key_header(r#""charge-ORD-123""#).unwrap(),
            "charge-ORD-123"
        );
        assert_eq!(
            parse_key_header(r#" "a \"b\" \\c" "#).unwrap(),
            r#"a "b" \c"#
        );
        assert_eq!(
            parse_key_header("charge-ORD-123").unwrap(),
            "charge-ORD-123"
        );
        assert!(parse_key_header(r#""unterminated"#).is_err());
        assert!(parse_key_header(r#""a"b"#).is_err());
        assert!(parse_key_header(r#""a\nb""#).is_err());
        assert!(parse_key_header(r#""a", "b""#).is_err());
        assert!(parse_key_header("a, b").is_err());
        assert!(parse_key_header("").is_err());
        assert!(parse_key_header("\"é\"").is_err());
    }

    #[test]
    fn principals_of_each_kind_never_read_alike() {
        let iam = json!({"authorizer": {"iam": {"userArn": "arn:aws:iam::1:user/a"}}});
        let v1_iam = json!({"identity": {"userArn": "arn:aws:iam::1:user/a"}});
        let jwt1 = json!({"authorizer": {"jwt": {"claims": {"iss": "a:b", "sub": "c"}}}});
        let jwt2 = json!({"authorizer": {"jwt": {"claims": {"iss": "a", "sub": "b:c"}}}});
        let cognito = json!({"authorizer": {"claims": {"sub": "c", "iss": "a:b"}}});
        let lambda = json!({"authorizer": {"principalId": "arn:aws:iam::1:user/a"}});
        assert_eq!(principal(&iam), principal(&v1_iam));
        assert_ne!(principal(&jwt1), principal(&jwt2));
        assert_eq!(principal(&jwt1), principal(&cognito));
        assert_ne!(principal(&lambda), principal(&iam));
        assert_eq!(principal(&json!({})), None);
    }

    #[test]
    fn an_assumed_role_is_one_principal_whatever_its_session() {
        let role = |arn: &str| principal(&json!({"authorizer": {"iam": {"userArn": arn}}}));
        let a = role("arn:aws:sts::123456789012:assumed-role/producer/i-0abc");
        let b = role("arn:aws:sts::123456789012:assumed-role/producer/i-0def");
        assert_eq!(a, b);
        assert_eq!(
            a.as_ref().map(Principal::as_str),
            Some("iam:arn:aws:sts::123456789012:assumed-role/producer")
        );
        // Other roles, accounts and partitions stay apart.
        assert_ne!(
            a,
            role("arn:aws:sts::123456789012:assumed-role/other/i-0abc")
        );
        assert_ne!(
            a,
            role("arn:aws:sts::210987654321:assumed-role/producer/i-0abc")
        );
        assert_eq!(
            role("arn:aws-cn:sts::1:assumed-role/r/s")
                .as_ref()
                .map(Principal::as_str),
            Some("iam:arn:aws-cn:sts::1:assumed-role/r")
        );
        // Users and other ARNs are kept whole.
        assert_eq!(
            role("arn:aws:iam::1:user/path/a")
                .as_ref()
                .map(Principal::as_str),
            Some("iam:arn:aws:iam::1:user/path/a")
        );
        assert_eq!(
            role("arn:aws:sts::1:federated-user/bob")
                .as_ref()
                .map(Principal::as_str),
            Some("iam:arn:aws:sts::1:federated-user/bob")
        );
        assert_eq!(
            role("not-an-arn").as_ref().map(Principal::as_str),
            Some("iam:not-an-arn")
        );
    }
}
