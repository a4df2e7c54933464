// Package configentry holds the mesh's L7 config entries in Consul's
// shapes: proxy-defaults, service-defaults, service-router,
// service-splitter and service-resolver. The types are the official
// github.com/hashicorp/consul/api ones, so what the consul/api client writes
// is exactly what is stored and served.
//
// Decode turns user input (JSON or HCL, Consul's PascalCase or snake_case
// keys) into an entry; Validate checks one entry on its own, Set.Check
// checks it against the others (a router needs protocol http, a subset
// must exist); Compile turns the entries that concern one upstream into
// a Chain, the Envoy-independent discovery chain that the xDS server
// translates into routes and clusters.
//
// Files: decode.go and decodevalue.go (Parse/Decode: HCL1 or JSON into the
// consul/api types, unknown keys named with their line), validate*.go
// (per-kind rules, ErrInvalid), check.go (referential rules, ErrConflict),
// compile.go (the chain: routes, splits, targets, failover) and filter.go
// (subset filters: go-bexpr over Consul's health-entry view of an
// instance: Service.ID, Service.Service, Service.Tags, Service.Meta.<key>,
// Service.Port, Service.Address, Node.Node, Node.Meta.<key>, Checks).
package configentry
