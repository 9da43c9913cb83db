//! Closed sets of names that are stored as text and travel as strings: one macro gives each its
//! enum, its spelling, parsing, serde, the OpenAPI schema and (on the server) the sqlx conversions,
//! so a name is written once and a typo is a compile error instead of a silent mismatch.

/// Declares a vocabulary: `pub enum Name { Variant = "text", … }`.
///
/// The enum gets `as_str`, `ALL`, `Display`, `FromStr` (the error names the set and the value),
/// serde as its text, a string-enum OpenAPI schema, and, with the `ssr` feature, sqlx's `Type`,
/// `Encode` and `Decode` for Postgres `text` columns (a stored value outside the set is a decode
/// error, never a default).
macro_rules! vocabulary {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every member, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The stored and wire spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )+
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $( $text => Ok($name::$variant), )+
                    other => Err(format!(
                        "`{other}` is not a {}: expected one of {}",
                        $crate::model::vocab::words(stringify!($name)),
                        [$($text),+].join(", ")
                    )),
                }
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <::std::borrow::Cow<'de, str> as ::serde::Deserialize>::deserialize(d)?;
                text.parse().map_err(::serde::de::Error::custom)
            }
        }

        #[cfg(feature = "ssr")]
        impl ::utoipa::PartialSchema for $name {
            fn schema() -> ::utoipa::openapi::RefOr<::utoipa::openapi::schema::Schema> {
                ::utoipa::openapi::schema::ObjectBuilder::new()
                    .schema_type(::utoipa::openapi::schema::Type::String)
                    .enum_values(Some([$($text),+]))
                    .into()
            }
        }

        #[cfg(feature = "ssr")]
        impl ::utoipa::ToSchema for $name {}

        #[cfg(feature = "ssr")]
        impl ::sqlx::Type<::sqlx::Postgres> for $name {
            fn type_info() -> ::sqlx::postgres::PgTypeInfo {
                <&str as ::sqlx::Type<::sqlx::Postgres>>::type_info()
            }

            fn compatible(ty: &::sqlx::postgres::PgTypeInfo) -> bool {
                <&str as ::sqlx::Type<::sqlx::Postgres>>::compatible(ty)
            }
        }

        #[cfg(feature = "ssr")]
        impl<'q> ::sqlx::Encode<'q, ::sqlx::Postgres> for $name {
            fn encode_by_ref(
                &self,
                buf: &mut ::sqlx::postgres::PgArgumentBuffer,
            ) -> Result<::sqlx::encode::IsNull, ::sqlx::error::BoxDynError> {
                <&str as ::sqlx::Encode<'q, ::sqlx::Postgres>>::encode(self.as_str(), buf)
            }
        }

        #[cfg(feature = "ssr")]
        impl<'r> ::sqlx::Decode<'r, ::sqlx::Postgres> for $name {
            fn decode(
                value: ::sqlx::postgres::PgValueRef<'r>,
            ) -> Result<Self, ::sqlx::error::BoxDynError> {
                let text = <&str as ::sqlx::Decode<'r, ::sqlx::Postgres>>::decode(value)?;
                Ok(text.parse::<$name>()?)
            }
        }
    };
}

pub(crate) use vocabulary;

/// `JobEventKind` → "job event kind", for error messages.
pub fn words(type_name: &str) -> String {
    let mut out = String::new();
    for (i, c) in type_name.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push(' ');
        }
        out.extend(c.to_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    vocabulary! {
        /// A test set.
        pub enum Colour {
            /// Red.
            Red = "red",
            /// Dark blue.
            DarkBlue = "dark_blue",
        }
    }

    #[test]
    fn spelling_round_trips_and_unknown_names_are_refused_with_the_set() {
        for c in Colour::ALL {
            assert_eq!(c.as_str().parse::<Colour>(), Ok(*c));
            let json = serde_json::to_string(c).unwrap();
            assert_eq!(json, format!("\"{c}\""));
            assert_eq!(serde_json::from_str::<Colour>(&json).unwrap(), *c);
        }
        let err = "green".parse::<Colour>().unwrap_err();
        assert_eq!(
            err,
            "`green` is not a colour: expected one of red, dark_blue"
        );
        assert!(serde_json::from_str::<Colour>("\"Red\"").is_err());
    }

    #[test]
    fn type_names_become_words() {
        assert_eq!(words("JobEventKind"), "job event kind");
        assert_eq!(words("GpuState"), "gpu state");
    }
}
