//! How an audit row keeps its path and its request id in few bytes (issue
//! 14, migration 0021): the path as the route it matched (a name, stored
//! once in `audit_names`) and the raw text of the route's parameters, and a
//! request id of the form this service gives (`3a1a688b7049-1c`) as two
//! integers; a batch id among the parameters, as the batch's number. Each
//! form is used only for a value it gives back exactly; any other value is
//! kept as it came.

/// The raw text of each `{…}` parameter of `route` in `path`, joined by
/// `/` (a parameter is one path segment, so holds none), if `path` is
/// `route` with them filled in, and [`fill_route`] gives `path` back.
pub fn route_parameters(route: &str, path: &str) -> Option<String> {
    let (mut template, mut rest) = (route, path);
    let mut parameters = Vec::new();
    while let Some(open) = template.find('{') {
        rest = rest.strip_prefix(&template[..open])?;
        let close = open + template[open..].find('}')?;
        template = &template[close + 1..];
        let end = rest.find('/').unwrap_or(rest.len());
        if end == 0 {
            return None;
        }
        parameters.push(&rest[..end]);
        rest = &rest[end..];
    }
    let joined = parameters.join("/");
    (rest == template && fill_route(route, &joined) == path).then_some(joined)
}

/// The parameters of `route` (as [`route_parameters`] gave them) that are
/// a batch id: the route's only parameter is `{batch_id}`. The row then
/// refers to the batch by number if it is stored.
pub fn batch_parameter<'a>(route: &str, parameters: &'a str) -> Option<&'a str> {
    (route.matches('{').count() == 1 && route.contains("{batch_id}")).then_some(parameters)
}

/// `route` with its `{…}` parameters replaced, in order, by those of
/// `parameters` (as [`route_parameters`] joined them).
pub fn fill_route(route: &str, parameters: &str) -> String {
    let mut values = parameters.split('/');
    let mut out = String::with_capacity(route.len() + parameters.len());
    let mut template = route;
    while let Some(open) = template.find('{') {
        let Some(close) = template[open..].find('}').map(|c| open + c) else { break };
        out.push_str(&template[..open]);
        out.push_str(values.next().unwrap_or_default());
        template = &template[close + 1..];
    }
    out.push_str(template);
    out
}

/// The two numbers of a request id of the form this service gives (twelve
/// hexadecimal digits of the process, a dash, a counter in hexadecimal),
/// if [`request_id_text`] gives it back exactly.
pub fn request_id_numbers(id: &str) -> Option<(i64, i64)> {
    let (process, seq) = id.split_once('-')?;
    if process.len() != 12 {
        return None;
    }
    // Written back, the numbers give `id` only if it was lowercase, without
    // a sign or leading zeros: the comparison is the whole check of form.
    let numbers = (i64::from_str_radix(process, 16).ok()?, i64::from_str_radix(seq, 16).ok()?);
    (request_id_text(numbers.0, numbers.1) == id).then_some(numbers)
}

/// The request id [`request_id_numbers`] took apart.
pub fn request_id_text(process: i64, seq: i64) -> String {
    format!("{process:012x}-{seq:x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_kept_as_its_route_parameters_and_given_back_whole() {
        let cases = [
            ("/v1/batches", "/v1/batches", ""),
            ("/v1/batches/{batch_id}/commit", "/v1/batches/t-20260824-001/commit", "t-20260824-001"),
            ("/v1/tokens/{name}", "/v1/tokens/tmp", "tmp"),
            (
                "/v1/partitions/{dataset}/{partition}/invalidate",
                "/v1/partitions/sales.orders/dt%3D2026-08-24/invalidate",
                "sales.orders/dt%3D2026-08-24",
            ),
            // Percent-encoded as the client sent it, a slash included.
            ("/v1/datasets/{dataset}", "/v1/datasets/a%2Fb", "a%2Fb"),
        ];
        for (route, path, parameters) in cases {
            assert_eq!(route_parameters(route, path).as_deref(), Some(parameters), "{path}");
            assert_eq!(fill_route(route, parameters), path);
        }
    }

    #[test]
    fn only_a_routes_one_batch_id_is_a_batch() {
        assert_eq!(batch_parameter("/v1/batches/{batch_id}/commit", "t-20260824-001"), Some("t-20260824-001"));
        assert_eq!(batch_parameter("/v1/batches", ""), None);
        assert_eq!(batch_parameter("/v1/tokens/{name}", "t-20260824-001"), None);
        assert_eq!(batch_parameter("/v1/x/{batch_id}/{other}", "a/b"), None);
    }

    #[test]
    fn a_path_that_is_not_its_route_filled_in_is_kept_whole() {
        for (route, path) in [
            ("/v1/batches/{batch_id}/commit", "/v1/batches/x/fail"),
            ("/v1/batches/{batch_id}/commit", "/v1/batches//commit"),
            ("/v1/batches/{batch_id}/commit", "/v1/batches/x/commit/"),
            ("/v1/batches", "/v1/batches/"),
            ("/v1/tokens/{name}", "/v1/tokens/a/b"),
            ("token/{name}", "/v1/tokens/a"),
        ] {
            assert_eq!(route_parameters(route, path), None, "{path} is not {route}");
        }
    }

    #[test]
    fn a_request_id_of_this_service_is_two_numbers_and_any_other_its_text() {
        for id in ["3a1a688b7049-1c", "000000000000-0", "ffffffffffff-fffffffffffffff"] {
            let (process, seq) = request_id_numbers(id).unwrap_or_else(|| panic!("{id}"));
            assert_eq!(request_id_text(process, seq), id);
        }
        assert_eq!(request_id_numbers("3a1a688b7049-1c"), Some((0x3a1a688b7049, 0x1c)));
        for id in [
            "-",
            "old-1",
            "3a1a688b7049-01c",
            "3A1A688B7049-1c",
            "3a1a688b7049-1C",
            "3a1a688b704-1c",
            "3a1a688b70490-1c",
            "3a1a688b7049-",
            "3a1a688b7049-1c-2",
            "3a1a688b7049-+1c",
            "3a1a688b7049-ffffffffffffffff",
            "f81d4fae-7dec-11d0-a765-00a0c91e6bf6",
        ] {
            assert_eq!(request_id_numbers(id), None, "{id} is kept as text");
        }
    }
}
