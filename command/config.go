package command

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/configentry"
)

// maxConfigFile bounds a config entry file.
const maxConfigFile = 1 << 20

func init() {
	register(
		&command{
			name: "config write", args: "[options] FILE", synopsis: "Write an L7 config entry",
			help: `Writes the config entry in FILE ("-" reads stdin): proxy-defaults,
service-defaults, service-router, service-splitter or service-resolver, in
HCL or JSON with Consul's keys (PascalCase or snake_case), as Consul's
'config write'. The servers check it against the other entries first (a
router needs an http service, a split's subsets must exist...); a refused
entry changes nothing. With -cas, the entry is written only if its modify
index is still -modify-index (0: only if it does not exist yet).`,
			example: "$ meshlet config write config/canary/resolver.hcl\n$ meshlet config write -cas -modify-index 42 splitter.json",
			run:     runConfigWrite,
		},
		&command{
			name: "config read", args: "-kind KIND -name NAME [options]", synopsis: "Print an L7 config entry",
			help:    "Prints the config entry of that kind and name as indented JSON.",
			example: "$ meshlet config read -kind service-resolver -name service-b",
			run:     runConfigRead,
		},
		&command{
			name: "config list", args: "-kind KIND [options]", synopsis: "List the L7 config entries of a kind",
			help:    "Prints the names of the config entries of a kind, one per line, sorted.",
			example: "$ meshlet config list -kind service-router",
			run:     runConfigList,
		},
		&command{
			name: "config delete", args: "-kind KIND -name NAME [options]", synopsis: "Delete an L7 config entry",
			help: `Deletes the config entry of that kind and name, unless another entry needs
it (a router or splitter naming a resolver's subset...). Deleting an entry
that does not exist is not an error. With -cas, only if its modify index is
still -modify-index.`,
			example: "$ meshlet config delete -kind service-splitter -name service-b",
			run:     runConfigDelete,
		},
	)
}

// configCall is a parsed config command's client and flags.
type configCall struct {
	client      *consulapi.Client
	addr        string
	kind, name  string
	cas         bool
	modifyIndex uint64
}

// configArgs parses the common flags; withName adds -name, withCAS -cas
// and -modify-index, nargs is the number of arguments wanted.
func (e *env) configArgs(c *command, args []string, withKind, withName, withCAS bool, nargs int) (*configCall, *flag.FlagSet, int, bool) {
	fs := newFlags(c)
	addr := connectAddressFlag(fs)
	cc := &configCall{}
	if withKind {
		fs.StringVar(&cc.kind, "kind", "", "the entry's `KIND` (service-defaults, service-router...)")
	}
	if withName {
		fs.StringVar(&cc.name, "name", "", "the entry's `NAME`")
	}
	if withCAS {
		fs.BoolVar(&cc.cas, "cas", false, "check-and-set: act only if the entry's modify index is -modify-index")
		fs.Uint64Var(&cc.modifyIndex, "modify-index", 0, "the modify `INDEX` -cas expects (0: the entry must not exist)")
	}
	if code, ok := e.parse(c, fs, args); !ok {
		return nil, nil, code, false
	}
	switch {
	case fs.NArg() != nargs && nargs == 0:
		return nil, nil, e.usageError(c, "unexpected arguments"), false
	case fs.NArg() != nargs:
		return nil, nil, e.usageError(c, "expected one argument: FILE"), false
	case withKind && cc.kind == "":
		return nil, nil, e.usageError(c, "-kind is required"), false
	case withName && cc.name == "":
		return nil, nil, e.usageError(c, "-name is required"), false
	case withKind && !configentry.KnownKind(cc.kind):
		return nil, nil, e.errorf("unknown config entry kind %q (kinds: %v)", cc.kind, configentry.Kinds), false
	}
	client, err := consulClient(addr)
	if err != nil {
		return nil, nil, e.errorf("%v", err), false
	}
	cc.client, cc.addr = client, addr.Addr
	return cc, fs, 0, true
}

func runConfigWrite(e *env, c *command, args []string) int {
	cc, fs, code, ok := e.configArgs(c, args, false, false, true, 1)
	if !ok {
		return code
	}
	name := fs.Arg(0)
	src, err := readConfigFile(e, name)
	if err != nil {
		return e.errorf("%v", err)
	}
	entry, err := configentry.Parse(name, src)
	if err != nil {
		return e.errorf("%v", err)
	}
	key := configentry.KeyOf(entry)
	var written bool
	if cc.cas {
		written, _, err = cc.client.ConfigEntries().CAS(entry, cc.modifyIndex, nil)
	} else {
		written, _, err = cc.client.ConfigEntries().Set(entry, nil)
	}
	switch {
	case err != nil:
		return e.errorf("failed to write config entry %s: %s", key, describeConsul(err, cc.addr))
	case !written:
		return e.errorf("config entry %s was not written: its modify index is not %d", key, cc.modifyIndex)
	}
	fmt.Fprintf(e.stdout, "Config entry written: %s\n", key)
	return exitOK
}

// readConfigFile reads FILE, or stdin for "-".
func readConfigFile(e *env, name string) ([]byte, error) {
	var r io.Reader = e.stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("failed to read config entry file: %w", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxConfigFile+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("failed to read config entry file %s: %w", name, err)
	case len(b) > maxConfigFile:
		return nil, fmt.Errorf("config entry file %s is larger than %d bytes", name, maxConfigFile)
	}
	return b, nil
}

func runConfigRead(e *env, c *command, args []string) int {
	cc, _, code, ok := e.configArgs(c, args, true, true, false, 0)
	if !ok {
		return code
	}
	key := configentry.Key{Kind: cc.kind, Name: cc.name}
	entry, _, err := cc.client.ConfigEntries().Get(cc.kind, cc.name, nil)
	var se consulapi.StatusError
	switch {
	case errors.As(err, &se) && se.Code == 404:
		return e.errorf("config entry %s not found", key)
	case err != nil:
		return e.errorf("failed to read config entry %s: %s", key, describeConsul(err, cc.addr))
	}
	b, err := json.MarshalIndent(entry, "", "  ")
	if err != nil {
		return e.errorf("failed to encode config entry %s: %v", key, err)
	}
	fmt.Fprintln(e.stdout, string(b))
	return exitOK
}

func runConfigList(e *env, c *command, args []string) int {
	cc, _, code, ok := e.configArgs(c, args, true, false, false, 0)
	if !ok {
		return code
	}
	entries, _, err := cc.client.ConfigEntries().List(cc.kind, nil)
	if err != nil {
		return e.errorf("failed to list config entries of kind %s: %s", cc.kind, describeConsul(err, cc.addr))
	}
	names := make([]string, 0, len(entries))
	for _, en := range entries {
		names = append(names, en.GetName())
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintln(e.stdout, n)
	}
	return exitOK
}

func runConfigDelete(e *env, c *command, args []string) int {
	cc, _, code, ok := e.configArgs(c, args, true, true, true, 0)
	if !ok {
		return code
	}
	key := configentry.Key{Kind: cc.kind, Name: cc.name}
	var err error
	deleted := true
	if cc.cas {
		deleted, _, err = cc.client.ConfigEntries().DeleteCAS(cc.kind, cc.name, cc.modifyIndex, nil)
	} else {
		_, err = cc.client.ConfigEntries().Delete(cc.kind, cc.name, nil)
	}
	switch {
	case err != nil:
		return e.errorf("failed to delete config entry %s: %s", key, describeConsul(err, cc.addr))
	case !deleted:
		return e.errorf("config entry %s was not deleted: its modify index is not %d", key, cc.modifyIndex)
	}
	fmt.Fprintf(e.stdout, "Config entry deleted: %s\n", key)
	return exitOK
}
