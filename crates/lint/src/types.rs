//! Terraform type constraints: parsing (`string`, `list(...)`, `object({...})`,
//! `optional(...)`, ...) and the "does the declared type accept what the
//! generated root passes" check behind `input/type`.

use std::collections::BTreeMap;
use std::fmt;

use hcl_edit::expr::{Expression, ObjectKey};

/// A type constraint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ty {
    /// `any` (or a value whose shape the linter cannot know).
    Any,
    /// `string`
    String,
    /// `number`
    Number,
    /// `bool`
    Bool,
    /// `list(T)`
    List(Box<Ty>),
    /// `set(T)`
    Set(Box<Ty>),
    /// `map(T)`
    Map(Box<Ty>),
    /// `tuple([T, ...])`
    Tuple(Vec<Ty>),
    /// `object({name = T, ...})`; the flag is `optional(...)`.
    Object(BTreeMap<String, (Ty, bool)>),
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Any => f.write_str("any"),
            Ty::String => f.write_str("string"),
            Ty::Number => f.write_str("number"),
            Ty::Bool => f.write_str("bool"),
            Ty::List(t) => write!(f, "list({t})"),
            Ty::Set(t) => write!(f, "set({t})"),
            Ty::Map(t) => write!(f, "map({t})"),
            Ty::Tuple(ts) => {
                f.write_str("tuple([")?;
                for (i, t) in ts.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{t}")?;
                }
                f.write_str("])")
            }
            Ty::Object(attrs) => {
                f.write_str("object({")?;
                for (i, (name, (t, optional))) in attrs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    if *optional {
                        write!(f, "{name}=optional({t})")?;
                    } else {
                        write!(f, "{name}={t}")?;
                    }
                }
                f.write_str("})")
            }
        }
    }
}

/// Parses a type constraint written as an HCL expression.
pub fn parse_type_expr(expr: &Expression) -> Result<Ty, String> {
    parse(expr, false).map(|(t, _)| t)
}

/// Parses a type constraint given as a string (JSON syntax, contract specs).
pub fn parse_type_str(s: &str) -> Result<Ty, String> {
    let expr = hcl_edit::parser::parse_expr(s).map_err(|e| e.message().to_owned())?;
    parse_type_expr(&expr)
}

fn parse(expr: &Expression, in_object: bool) -> Result<(Ty, bool), String> {
    match expr {
        Expression::Parenthesis(p) => parse(p.inner(), in_object),
        Expression::Variable(v) => match v.as_str() {
            "any" => Ok((Ty::Any, false)),
            "string" => Ok((Ty::String, false)),
            "number" => Ok((Ty::Number, false)),
            "bool" => Ok((Ty::Bool, false)),
            other => Err(format!("unknown type keyword {other:?}")),
        },
        Expression::String(s) => Err(format!(
            "quoted type constraint {:?} is legacy syntax; write it without quotes",
            s.as_str()
        )),
        Expression::FuncCall(call) => {
            let name = call.name.name.as_str();
            let args: Vec<&Expression> = call.args.iter().collect();
            let one = |args: &[&Expression]| -> Result<Ty, String> {
                match args {
                    [a] => parse(a, false).map(|(t, _)| t),
                    _ => Err(format!("{name}(...) takes exactly one argument")),
                }
            };
            match name {
                "list" => Ok((Ty::List(Box::new(one(&args)?)), false)),
                "set" => Ok((Ty::Set(Box::new(one(&args)?)), false)),
                "map" => Ok((Ty::Map(Box::new(one(&args)?)), false)),
                "optional" if in_object => match args.as_slice() {
                    [t] | [t, _] => Ok((parse(t, false)?.0, true)),
                    _ => Err("optional(...) takes a type and an optional default".to_owned()),
                },
                "optional" => Err("optional(...) is only allowed for object attributes".to_owned()),
                "tuple" => match args.as_slice() {
                    [Expression::Array(items)] => Ok((
                        Ty::Tuple(
                            items
                                .iter()
                                .map(|i| parse(i, false).map(|(t, _)| t))
                                .collect::<Result<_, _>>()?,
                        ),
                        false,
                    )),
                    _ => Err("tuple(...) takes a list of types".to_owned()),
                },
                "object" => match args.as_slice() {
                    [Expression::Object(obj)] => {
                        let mut attrs = BTreeMap::new();
                        for (key, value) in obj.iter() {
                            let key = match key {
                                ObjectKey::Ident(i) => i.as_str().to_owned(),
                                ObjectKey::Expression(Expression::String(s)) => {
                                    s.as_str().to_owned()
                                }
                                ObjectKey::Expression(_) => {
                                    return Err("object attribute names must be names".to_owned());
                                }
                            };
                            attrs.insert(key, parse(value.expr(), true)?);
                        }
                        Ok((Ty::Object(attrs), false))
                    }
                    _ => Err("object(...) takes an object of attribute types".to_owned()),
                },
                other => Err(format!("unknown type constructor {other}(...)")),
            }
        }
        _ => Err("not a type constraint".to_owned()),
    }
}

/// Whether every value of type `source` (what the generated root passes)
/// converts to `target` (what the module declares). `Err` says why not.
pub fn accepts(target: &Ty, source: &Ty) -> Result<(), String> {
    accepts_at(target, source, "")
}

fn at(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!(" at {path}")
    }
}

fn accepts_at(target: &Ty, source: &Ty, path: &str) -> Result<(), String> {
    let mismatch = || Err(format!("{source} does not convert to {target}{}", at(path)));
    match (target, source) {
        (Ty::Any, _) | (_, Ty::Any) => Ok(()),
        (Ty::String, Ty::String | Ty::Number | Ty::Bool) => Ok(()),
        (Ty::Number, Ty::Number) | (Ty::Bool, Ty::Bool) => Ok(()),
        (Ty::List(t) | Ty::Set(t), Ty::List(s) | Ty::Set(s)) => {
            accepts_at(t, s, &format!("{path}[*]"))
        }
        (Ty::List(t) | Ty::Set(t), Ty::Tuple(ss)) => ss
            .iter()
            .enumerate()
            .try_for_each(|(i, s)| accepts_at(t, s, &format!("{path}[{i}]"))),
        (Ty::Tuple(ts), Ty::Tuple(ss)) if ts.len() == ss.len() => ts
            .iter()
            .zip(ss)
            .enumerate()
            .try_for_each(|(i, (t, s))| accepts_at(t, s, &format!("{path}[{i}]"))),
        (Ty::Map(t), Ty::Map(s)) => accepts_at(t, s, &format!("{path}[*]")),
        (Ty::Map(t), Ty::Object(attrs)) => attrs
            .iter()
            .try_for_each(|(name, (s, _))| accepts_at(t, s, &format!("{path}.{name}"))),
        (Ty::Object(targets), Ty::Object(sources)) => {
            for (name, (t, optional)) in targets {
                match sources.get(name) {
                    Some((s, _)) => accepts_at(t, s, &format!("{path}.{name}"))?,
                    None if *optional => {}
                    None => {
                        return Err(format!(
                            "attribute {name:?}{} is required by the declared type but the generated root does not pass it",
                            at(path)
                        ));
                    }
                }
            }
            Ok(())
        }
        _ => mismatch(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Ty {
        match parse_type_str(s) {
            Ok(t) => t,
            Err(e) => panic!("{s}: {e}"),
        }
    }

    #[test]
    fn parses_and_displays() {
        assert_eq!(t("string"), Ty::String);
        assert_eq!(t("list(map(string))").to_string(), "list(map(string))");
        assert_eq!(
            t("object({b=optional(number, 3), a=string})").to_string(),
            "object({a=string, b=optional(number)})"
        );
        assert!(parse_type_str("optional(string)").is_err());
        assert!(parse_type_str("\"string\"").is_err());
        assert!(parse_type_str("strng").is_err());
    }

    #[test]
    fn acceptance() {
        assert!(accepts(&t("string"), &t("number")).is_ok());
        assert!(accepts(&t("number"), &t("string")).is_err());
        assert!(accepts(&t("set(string)"), &t("list(string)")).is_ok());
        assert!(accepts(&t("map(any)"), &t("map(string)")).is_ok());
        assert!(accepts(&t("object({a=string})"), &t("map(string)")).is_err());
        assert!(
            accepts(
                &t("object({pods=optional(list(string), []), x=optional(string)})"),
                &t("object({pods=list(string), services=list(string)})")
            )
            .is_ok()
        );
        let err = accepts(&t("object({a=string, b=bool})"), &t("object({a=string})"));
        assert!(err.is_err_and(|e| e.contains("\"b\"")));
        assert!(accepts(&t("list(number)"), &t("list(string)")).is_err());
    }
}
