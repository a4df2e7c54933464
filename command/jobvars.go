package command

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/zclconf/go-cty/cty"
	ctyjson "github.com/zclconf/go-cty/cty/json"

	"github.com/meshlet/meshlet/jobspecs"
)

// envVarPrefix names a jobspec variable's value in the environment, as
// Nomad's NOMAD_VAR_<name>.
const envVarPrefix = "NOMAD_VAR_"

// jobVars are a jobspec command's variable inputs: -var key=value and
// -var-file FILE (HCL, or JSON for *.json; both repeatable), and
// NOMAD_VAR_<name> from the environment. Nomad's precedence: -var over
// -var-file (a later file over an earlier one) over the environment over
// the variable's default.
type jobVars struct {
	vars  varsFlag
	files stringList
}

func addJobVarFlags(fs *flag.FlagSet) *jobVars {
	v := &jobVars{vars: varsFlag{}}
	fs.Var(v.vars, "var", "set a jobspec variable, `key=value` (repeatable)")
	fs.Var(&v.files, "var-file", "read jobspec variables from `FILE`: name = value lines, or a JSON object for *.json (repeatable)")
	return v
}

// options are the parse options carrying every value given; a -var-file
// of "-" is read from stdin.
func (v *jobVars) options(stdin io.Reader) (*jobspecs.ParseOptions, error) {
	opts := &jobspecs.ParseOptions{Vars: v.vars, EnvVars: envJobVars(os.Environ())}
	for _, path := range v.files {
		vars, err := readVarFile(stdin, path)
		if err != nil {
			return nil, err
		}
		opts.FileVars = append(opts.FileVars, jobspecs.VarFile{Name: path, Vars: vars})
	}
	return opts, nil
}

// envJobVars are the NOMAD_VAR_<name>=value entries of environ.
func envJobVars(environ []string) map[string]string {
	out := map[string]string{}
	for _, kv := range environ {
		if rest, ok := strings.CutPrefix(kv, envVarPrefix); ok {
			if name, val, ok := strings.Cut(rest, "="); ok && name != "" {
				out[name] = val
			}
		}
	}
	return out
}

// readVarFile reads one -var-file: a JSON object when the name ends in
// .json, else HCL name = value lines. Values keep their types (a JSON
// number is a number, an array a tuple), as Nomad reads them.
func readVarFile(stdin io.Reader, path string) (map[string]cty.Value, error) {
	src, err := readInputFile(stdin, path, "variable file")
	if err != nil {
		return nil, err
	}
	if !strings.EqualFold(filepath.Ext(path), ".json") {
		vars, err := jobspecs.ParseVariables(path, src, nil)
		if err != nil {
			return nil, fmt.Errorf("variable file %s: %w", path, err)
		}
		return vars, nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(src, &raw); err != nil {
		return nil, fmt.Errorf("variable file %s: want a JSON object of variable values: %w", path, err)
	}
	out := make(map[string]cty.Value, len(raw))
	for name, msg := range raw {
		typ, err := ctyjson.ImpliedType(msg)
		if err == nil {
			out[name], err = ctyjson.Unmarshal(msg, typ)
		}
		if err != nil {
			return nil, fmt.Errorf("variable file %s: variable %q: %w", path, name, err)
		}
	}
	return out, nil
}
