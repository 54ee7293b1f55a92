//! Vocabulary stored and sent as fixed text (lower case, or upper case where it is a state the
//! user reads as one): each enum has `as_str`, `Display`, `FromStr` (the exact text) and `ALL`.
//! The server's store keeps these texts in its rows; the JSON API sends the same words.

/// Declares an enum stored as fixed text. Exported for the store's own such enums.
#[macro_export]
macro_rules! text_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vm])* $variant),+
        }
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(format!("unknown {} {s:?}", stringify!($name))),
                }
            }
        }
        // In JSON (a stored plan, say) as its text, so the words are the same everywhere.
        impl $crate::__serde::Serialize for $name {
            fn serialize<S: $crate::__serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
        impl<'de> $crate::__serde::Deserialize<'de> for $name {
            fn deserialize<D: $crate::__serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str> as $crate::__serde::Deserialize>::deserialize(d)?;
                s.parse().map_err(<D::Error as $crate::__serde::de::Error>::custom)
            }
        }
    };
}

text_enum!(
    /// Where an endpoint takeover is in its life (see `gantry_core::takeover`).
    TakeoverPhase {
        WaitingReady => "WAITING_READY",
        AwaitingConfirmation => "AWAITING_CONFIRMATION",
        Switching => "SWITCHING",
        Draining => "DRAINING",
        Done => "DONE",
        Failed => "FAILED",
        Cancelled => "CANCELLED",
    }
);

impl TakeoverPhase {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TakeoverPhase::Done | TakeoverPhase::Failed | TakeoverPhase::Cancelled
        )
    }
}

text_enum!(
    /// How a new workflow takes an endpoint over: the old one serves until the new one is ready
    /// (`when-ready`, the default), or is stopped first (`stop-first`).
    TakeoverMode {
        WhenReady => "when-ready",
        StopFirst => "stop-first",
    }
);

text_enum!(
    /// Which client asked for something (the `x-gantry-channel` header): recorded on takeovers
    /// and their confirmations. An MCP client's takeover always waits for a person.
    Channel {
        Cli => "cli",
        Api => "api",
        Web => "web",
        Mcp => "mcp",
    }
);

text_enum!(
    /// Who may call a persistent endpoint: its owner (`user`), their group, anyone signed in
    /// (`organization`), or anyone at all (`public`).
    EndpointScope {
        User => "user",
        Group => "group",
        Organization => "organization",
        Public => "public",
    }
);

text_enum!(
    /// Whose a secret is: the user's, their group's, or the whole organization's.
    SecretScope {
        User => "user",
        Group => "group",
        Organization => "organization",
    }
);

text_enum!(
    /// What a secret holds: an opaque value, or the fields of a credential for S3, HTTP or an
    /// image registry.
    SecretType {
        Value => "value",
        S3 => "s3",
        Http => "http",
        Image => "image",
    }
);

text_enum!(
    /// Whose a persistent volume is: the user's or their group's.
    VolumeScope {
        User => "user",
        Group => "group",
    }
);

text_enum!(
    /// How a storage provisioner makes volumes: `hostpath`, a directory every node of its pool
    /// sees, is the only driver so far.
    StorageDriver {
        HostPath => "hostpath",
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_text_reads_back_and_nothing_else_does() {
        for p in TakeoverPhase::ALL {
            assert_eq!(p.as_str().parse::<TakeoverPhase>(), Ok(*p));
        }
        for m in TakeoverMode::ALL {
            assert_eq!(m.as_str().parse::<TakeoverMode>(), Ok(*m));
        }
        for c in Channel::ALL {
            assert_eq!(c.to_string().parse::<Channel>(), Ok(*c));
        }
        for s in EndpointScope::ALL {
            assert_eq!(s.as_str().parse::<EndpointScope>(), Ok(*s));
        }
        for s in SecretScope::ALL {
            assert_eq!(s.as_str().parse::<SecretScope>(), Ok(*s));
        }
        for t in SecretType::ALL {
            assert_eq!(t.as_str().parse::<SecretType>(), Ok(*t));
        }
        for s in VolumeScope::ALL {
            assert_eq!(s.as_str().parse::<VolumeScope>(), Ok(*s));
        }
        assert_eq!("hostpath".parse(), Ok(StorageDriver::HostPath));
        assert!(
            "waiting_ready".parse::<TakeoverPhase>().is_err(),
            "exact text"
        );
        assert!(
            "account".parse::<SecretScope>().is_err(),
            "aliases are the CLI's, not stored"
        );
        assert!("When-Ready".parse::<TakeoverMode>().is_err());
        assert!("".parse::<Channel>().is_err());
        assert_eq!(
            serde_json::to_string(&TakeoverMode::StopFirst).unwrap(),
            r#""stop-first""#
        );
        assert_eq!(
            serde_json::from_str::<VolumeScope>(r#""group""#).unwrap(),
            VolumeScope::Group
        );
        assert!(serde_json::from_str::<VolumeScope>(r#""organization""#).is_err());
    }
}
