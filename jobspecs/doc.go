// Package jobspecs owns meshlet's jobspec front end: it parses Nomad HCL2
// jobspecs into *structs.Job (Parse, ParseFile), fills Nomad's defaults
// (Canonicalize) and checks jobs against the rules meshlet enforces
// (Validate, also applied by Parse with file:line:col positions).
//
// The parser is lenient where Nomad users expect it: numbers and strings
// convert into each other, map-ish blocks (env, meta, config) may be written
// as blocks or as map attributes, and runtime interpolations such as
// "${NOMAD_PORT_http}" or a bare attr.unique.network.ip-address are kept as
// "${...}" text for the client to expand when the task starts. Only var.*,
// local.* and Nomad's functions are evaluated at parse time (those reading
// files only when ParseOptions.FileDir is set, as ParseFile does). Free-form maps
// (task config, proxy config) decode to map[string]any holding string, int
// (whole numbers), float64, bool, []any and map[string]any values; a nested
// block that appears once becomes a map, one that repeats a []any of maps.
//
// Blocks Nomad knows but meshlet does not run (ephemeral_disk, vault,
// identity...) are parsed and reported as warnings at their position, never
// dropped silently; unknown attributes and blocks are errors.
//
// Parsing is bounded (Limits): the source's size, nesting and tokens are
// checked before HCL's recursive parser sees it, every function checks the
// size of its result before building it, and templates, collections, for
// loops and operators are charged to a per-parse budget through identity
// functions inserted into the syntax tree (rewrite.go). A jobspec that
// asks for too much gets an "Evaluation limit exceeded" error at the
// expression's position instead of exhausting the process. Validate bounds
// group counts and the job's size (ValidateOptions).
//
// Concurrency: every function is safe for concurrent use; nothing is shared
// between calls. Canonicalize mutates the job it is given, so callers must
// not share that job with other goroutines while it runs.
package jobspecs
