// Package template renders a task's Nomad template blocks into files (and,
// with env = true, into the task's environment), and re-renders them when
// the data they read changes, applying the template's change_mode
// (restart, signal or noop) to the running task.
//
// # Why not consul-template
//
// Nomad renders templates with hashicorp/consul-template. Its v0.41 module
// pulls vault/api, a 2023 pseudo-version of nomad/api, sprig, toml and
// yaml (about forty modules into go.mod), and it reads Consul and Nomad
// over HTTP, which here would mean an ACL token and the HTTPS settings of
// meshlet's own API just to read the catalog the agent holds in memory.
// This package is a focused renderer on text/template with
// consul-template's semantics for the functions jobs use: env, service,
// services, nomadService, file, key/keyOrDefault (which fail: meshlet has
// no KV store), toJSON, toJSONPretty, parseJSON, split, join, toLower,
// toUpper, replaceAll, trimSpace, contains, plus the Vault and Nomad
// variable functions, which fail with a message saying meshlet has
// neither. Service data comes from the agent's in-process catalog
// (package catalog); its change notifications replace consul-template's
// blocking queries, so nothing leaves the process.
//
// # Semantics
//
// A template's first render blocks the task's start (as in Nomad) while a
// service it reads has no healthy instance; the task records a "Template"
// event naming what it waits for ("Missing: health.service(db|passing)").
// Once rendered, an empty service renders as empty. A catalog change
// schedules only the templates whose last render read a changed service
// (any change, while a template has not rendered or its last render
// failed), as consul-template follows each template's own dependencies;
// files are polled. Re-renders honour the template's wait (min: quiet time after a change; max: the longest a
// change is held) and splay (a random delay before the change_mode
// acts); a file is written only when its content changes. Destinations
// resolve inside the task directory or the allocation's shared alloc
// directory and are written without following symbolic links. After an
// agent restart a running task is not blocked: its env templates are read
// back from their files and every template is rendered again once the
// catalog had DefaultRestoreDelay to refill; only a changed file acts.
//
// # Concurrency
//
// A Hook belongs to one task runner: Prestart runs once on the runner's
// goroutine, then one watcher goroutine owns the templates' state until
// Stop. Env may be called from any goroutine; mu guards the rendered
// environment only, chMu the catalog changes the watcher has not taken.
package template
