//! How every builder in the crate writes its setters: by value, one field
//! each, `#[must_use]` (a setter whose result is dropped sets nothing).

/// Writes builder setters that take `self` by value and set one field.
///
/// ```text
/// setters! {
///     /// Docs.
///     pub fn lease(Duration) => lease;                   // self.lease = value
///     pub fn max_pending(usize) => config.max_pending = Some; // self.config.max_pending = Some(value)
/// }
/// ```
macro_rules! setters {
    ($(
        $(#[$doc:meta])*
        $vis:vis fn $name:ident($ty:ty) => $($place:ident).+ $(= $wrap:ident)?;
    )*) => {
        $(
            $(#[$doc])*
            #[must_use]
            $vis fn $name(mut self, value: $ty) -> Self {
                self.$($place).+ = $($wrap)?(value);
                self
            }
        )*
    };
}

pub(crate) use setters;
