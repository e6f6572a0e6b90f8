"""A route table and the requests that exercise it (every cluster, direct
responses, 404s): sent through Envoy and dpukit-mesh by the tests that compare
the two request by request."""

from __future__ import annotations

CLUSTERS = ("api", "api_v2", "web", "static", "wild", "wild_deep", "admin", "regex", "query", "fallback",
            "method", "present")

VIRTUAL_HOSTS = """\
            - name: api
              domains: ["api.example.com", "api.example.com:8080"]
              routes:
              - match: {path: "/v1/health"}
                direct_response: {status: 200, body: {inline_string: "ok"}}
              - match:
                  prefix: "/v1/"
                  headers:
                  - name: x-version
                    string_match: {exact: "2"}
                route: {cluster: api_v2}
              - match:
                  prefix: "/v1/"
                  headers:
                  - name: x-canary
                    present_match: true
                route: {cluster: present}
              - match: {prefix: "/v1/"}
                route: {cluster: api}
              - match:
                  safe_regex: {regex: "/v[0-9]+/items/[0-9]+"}
                route: {cluster: regex}
              - match:
                  prefix: "/search"
                  query_parameters:
                  - name: q
                    present_match: true
                route: {cluster: query}
              - match:
                  prefix: "/m"
                  headers:
                  - name: ":method"
                    string_match: {exact: POST}
                route: {cluster: method}
              - match: {prefix: "/gone"}
                direct_response: {status: 410}
            - name: web
              domains: ["www.example.com", "example.com"]
              routes:
              - match: {prefix: "/static/", case_sensitive: false}
                route: {cluster: static}
              - match: {path: "/Exact"}
                route: {cluster: admin}
              - match: {prefix: "/"}
                route: {cluster: web}
            - name: wild_deep
              domains: ["*.deep.example.com"]
              routes:
              - match: {prefix: "/"}
                route: {cluster: wild_deep}
            - name: wild
              domains: ["*.example.com"]
              routes:
              - match: {prefix: "/"}
                route: {cluster: wild}
            - name: prefix_wild
              domains: ["shop.*"]
              routes:
              - match: {prefix: "/"}
                route: {cluster: fallback}"""

# (method, Host, path, extra headers)
REQUESTS: list[tuple[str, str, str, dict[str, str]]] = [
    ("GET", "api.example.com", "/v1/health", {}),
    ("GET", "api.example.com", "/v1/health/more", {}),
    ("GET", "api.example.com", "/v1/users", {}),
    ("GET", "api.example.com", "/v1/users", {"x-version": "2"}),
    ("GET", "api.example.com", "/v1/users", {"x-version": "3"}),
    ("GET", "api.example.com", "/v1/users", {"x-canary": ""}),
    ("GET", "api.example.com", "/v1", {}),
    ("GET", "api.example.com", "/V1/users", {}),
    ("GET", "api.example.com:8080", "/v1/users", {}),
    ("GET", "api.example.com:9090", "/v1/users", {}),
    ("GET", "API.Example.COM", "/v1/users", {}),
    ("GET", "api.example.com", "/v2/items/42", {}),
    ("GET", "api.example.com", "/v2/items/42x", {}),
    ("GET", "api.example.com", "/v2/items/42?x=1", {}),
    ("GET", "api.example.com", "/search?q=dpu", {}),
    ("GET", "api.example.com", "/search?p=dpu", {}),
    ("GET", "api.example.com", "/search", {}),
    ("POST", "api.example.com", "/m", {}),
    ("GET", "api.example.com", "/m", {}),
    ("GET", "api.example.com", "/gone/now", {}),
    ("GET", "api.example.com", "/nothing", {}),
    ("GET", "www.example.com", "/", {}),
    ("GET", "www.example.com", "/STATIC/app.js", {}),
    ("GET", "www.example.com", "/static/app.js", {}),
    ("GET", "www.example.com", "/Exact", {}),
    ("GET", "www.example.com", "/exact", {}),
    ("GET", "www.example.com", "/Exact?x=1", {}),
    ("GET", "example.com", "/anything", {}),
    ("GET", "a.example.com", "/", {}),
    ("GET", "a.b.example.com", "/", {}),
    ("GET", "x.deep.example.com", "/", {}),
    ("GET", "deep.example.com", "/", {}),
    ("GET", "shop.anything", "/", {}),
    ("GET", "shop.", "/", {}),
    ("GET", "other.org", "/", {}),
    ("GET", "example.org", "/v1/users", {}),
    ("HEAD", "www.example.com", "/", {}),
    ("DELETE", "api.example.com", "/v1/users/1", {}),
]
