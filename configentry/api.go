package configentry

// This file is the package's API; the bodies are filled in by the
// decode, validate and compile files.

// Decode reads one entry from a JSON or HCL-decoded map, with Consul's
// PascalCase or snake_case keys; unknown keys are errors.
func Decode(raw map[string]any) (Entry, error) { return decode(raw) }

// Parse reads one entry from a file's bytes: JSON when it starts with
// "{", else HCL (Consul's `config write` syntax). name is used in errors.
func Parse(name string, src []byte) (Entry, error) { return parse(name, src) }

// Validate checks one entry on its own and normalizes it (kind and
// protocol lower-cased, proxy-defaults named "global").
func Validate(e Entry) error { return validate(e) }

// Check validates writing e against the other entries of s (referential
// checks, as Consul does at write time); s is not changed.
func (s *Set) Check(e Entry) error { return s.check(e) }

// CheckDelete validates removing the entry k (nothing else may need it).
func (s *Set) CheckDelete(k Key) error { return s.checkDelete(k) }

// Protocol is a service's protocol: its service-defaults, else
// proxy-defaults' config "protocol", else tcp.
func (s *Set) Protocol(service string) string { return s.protocol(service) }

// Compile builds the discovery chain of service as seen from datacenter dc.
func (s *Set) Compile(service, dc string) (*Chain, error) { return s.compile(service, dc) }
