package taskenv

import "strings"

// Env is a built task environment.
type Env struct {
	vars map[string]string
	node map[string]string
}

// Map returns a copy of the variables to pass to the task.
func (e *Env) Map() map[string]string {
	out := make(map[string]string, len(e.vars))
	for k, v := range e.vars {
		out[k] = v
	}
	return out
}

// Lookup resolves one reference: an env var name or attr./meta./node. key.
func (e *Env) Lookup(key string) (string, bool) {
	if v, ok := e.vars[key]; ok {
		return v, true
	}
	v, ok := e.node[key]
	return v, ok
}

// ReplaceEnv interpolates every "${key}" in s; unknown keys and an
// unterminated "${" are left as they are.
func (e *Env) ReplaceEnv(s string) string {
	if !strings.Contains(s, "${") {
		return s
	}
	var out strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			out.WriteString(s)
			return out.String()
		}
		j := strings.IndexByte(s[i+2:], '}')
		if j < 0 {
			out.WriteString(s)
			return out.String()
		}
		out.WriteString(s[:i])
		key := strings.TrimSpace(s[i+2 : i+2+j])
		if v, ok := e.Lookup(key); ok {
			out.WriteString(v)
		} else {
			out.WriteString(s[i : i+3+j])
		}
		s = s[i+3+j:]
	}
}

// ReplaceAll interpolates strings anywhere inside v (maps, slices, nested);
// other values are returned unchanged. v is not modified.
func (e *Env) ReplaceAll(v any) any {
	switch t := v.(type) {
	case string:
		return e.ReplaceEnv(t)
	case map[string]any:
		return e.ParseConfig(t)
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = e.ReplaceAll(x)
		}
		return out
	case []string:
		out := make([]string, len(t))
		for i, x := range t {
			out[i] = e.ReplaceEnv(x)
		}
		return out
	case map[string]string:
		out := make(map[string]string, len(t))
		for k, x := range t {
			out[k] = e.ReplaceEnv(x)
		}
		return out
	case []map[string]any:
		out := make([]map[string]any, len(t))
		for i, x := range t {
			out[i] = e.ParseConfig(x)
		}
		return out
	}
	return v
}

// ParseConfig returns a copy of a task's driver config with every string
// interpolated, recursively.
func (e *Env) ParseConfig(cfg map[string]any) map[string]any {
	if cfg == nil {
		return nil
	}
	out := make(map[string]any, len(cfg))
	for k, v := range cfg {
		out[k] = e.ReplaceAll(v)
	}
	return out
}
