package command

import (
	"flag"
	"fmt"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/acl"
)

func init() {
	register(
		&command{
			name: "acl token create", args: "[options]", synopsis: "Create an ACL token and print its secret",
			help: `Creates an ACL token and prints it with its Secret ID, the only time the
secret is shown. A client token gets the rules of its -policy names; a
management token may do anything and takes no policies. With -ttl the
token expires after that long. Needs a management token.`,
			example: "$ meshlet acl token create -name ci -policy readonly -policy deploy\n" +
				"$ meshlet acl token create -name ops -type management -ttl 8h",
			run: runACLTokenCreate,
		},
		&command{
			name: "acl token list", args: "[options]", synopsis: "List ACL tokens",
			help:    "Lists the ACL tokens (never their secrets) and whether each has expired.",
			example: "$ meshlet acl token list\n$ meshlet acl token list -json",
			run:     runACLTokenList,
		},
		&command{
			name: "acl token info", args: "[options] ACCESSOR", synopsis: "Show an ACL token",
			help: `Shows the ACL token whose Accessor ID is ACCESSOR: its name, type,
policies and expiry. Its secret is not shown.`,
			example: "$ meshlet acl token info 4f2c9c1a-8e0b-4b57-a0ce-5f2b1f6d0a77",
			run:     runACLTokenInfo,
		},
		&command{
			name: "acl token update", args: "[options] ACCESSOR", synopsis: "Change an ACL token's name, type, policies or scope",
			help: `Changes the ACL token ACCESSOR: -name, -type, -global and -policy (the
policies given replace the token's; -type management drops them). Flags not
given keep their values. The secret does not change and is not shown.`,
			example: "$ meshlet acl token update -name ci-readonly -policy readonly 4f2c9c1a-8e0b-4b57-a0ce-5f2b1f6d0a77",
			run:     runACLTokenUpdate,
		},
		&command{
			name: "acl token delete", args: "[options] ACCESSOR", synopsis: "Delete (revoke) an ACL token",
			help:    "Deletes the ACL token ACCESSOR: its secret stops working.",
			example: "$ meshlet acl token delete 4f2c9c1a-8e0b-4b57-a0ce-5f2b1f6d0a77",
			run:     runACLTokenDelete,
		},
		&command{
			name: "acl token self", args: "[options]", synopsis: "Show the ACL token the CLI uses",
			help: `Shows the token whose secret the CLI sends (-token, MESHLET_TOKEN or
NOMAD_TOKEN), secret included.`,
			example: "$ MESHLET_TOKEN=<secret> meshlet acl token self",
			run:     runACLTokenSelf,
		},
	)
}

// accessorArg checks that the command got one argument, an Accessor ID,
// and returns it, or a usage message.
func accessorArg(fs *flag.FlagSet) (string, string) {
	switch {
	case fs.NArg() != 1:
		return "", "expected one argument: the token's ACCESSOR ID"
	case !aclNameRE.MatchString(fs.Arg(0)):
		return "", fmt.Sprintf("invalid accessor ID %q", fs.Arg(0))
	}
	return fs.Arg(0), ""
}

// tokenFlags are the token fields token create and update set.
type tokenFlags struct {
	name, typ, ttl string
	global         bool
	policies       stringList
}

// define adds the flags; typeDefault is -type's default.
func (f *tokenFlags) define(fs *flag.FlagSet, typeDefault string) {
	fs.StringVar(&f.name, "name", "", "human-readable `NAME` of the token")
	fs.StringVar(&f.typ, "type", typeDefault, "token `TYPE`: client or management")
	fs.Var(&f.policies, "policy", "`POLICY` the token grants (repeatable; client tokens only)")
	fs.BoolVar(&f.global, "global", false, "replicate the token to every region")
}

// check returns a usage message for a wrong -type or a management token
// with policies ("" when fine).
func (f *tokenFlags) check() string {
	switch {
	case f.typ != acl.TypeClient && f.typ != acl.TypeManagement:
		return fmt.Sprintf("-type %q must be client or management", f.typ)
	case f.typ == acl.TypeManagement && len(f.policies) > 0:
		return "a management token takes no -policy"
	}
	return ""
}

func runACLTokenCreate(e *env, c *command, args []string) int {
	fs := newFlags(c)
	t := addressFlag(fs)
	var f tokenFlags
	f.define(fs, acl.TypeClient)
	fs.StringVar(&f.ttl, "ttl", "", "`DURATION` after which the token expires, e.g. 8h (default: never)")
	asJSON := jsonFlag(fs)
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		return e.usageError(c, "acl token create takes no arguments")
	}
	if msg := f.check(); msg != "" {
		return e.usageError(c, msg)
	}
	if f.typ == acl.TypeClient && len(f.policies) == 0 {
		return e.usageError(c, "a client token needs at least one -policy")
	}
	tok := &nomadapi.ACLToken{Name: f.name, Type: f.typ, Policies: f.policies, Global: f.global}
	if f.ttl != "" {
		d, err := time.ParseDuration(f.ttl)
		if err != nil || d <= 0 {
			return e.usageError(c, fmt.Sprintf("-ttl %q must be a positive duration such as 30m or 8h", f.ttl))
		}
		tok.ExpirationTTL = d
	}
	client, code, ok := e.aclClient(t)
	if !ok {
		return code
	}
	created, _, err := client.ACLTokens().Create(tok, e.writeOpts())
	if err != nil {
		return e.errorf("failed to create ACL token: %s", t.describeACL(err))
	}
	return e.writeTokenOut(created, *asJSON, true)
}

func runACLTokenList(e *env, c *command, args []string) int {
	fs := newFlags(c)
	t := addressFlag(fs)
	asJSON := jsonFlag(fs)
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		return e.usageError(c, "acl token list takes no arguments")
	}
	client, code, ok := e.aclClient(t)
	if !ok {
		return code
	}
	tokens, _, err := client.ACLTokens().List(e.queryOpts())
	if err != nil {
		return e.errorf("failed to list ACL tokens: %s", t.describeACL(err))
	}
	if *asJSON {
		return e.writeJSON(tokens)
	}
	if len(tokens) == 0 {
		fmt.Fprintln(e.stdout, "No tokens found")
		return exitOK
	}
	now := time.Now()
	rows := []string{row("Name", "Type", "Global", "Accessor ID", "Expired")}
	for _, tok := range tokens {
		expired := tok.ExpirationTime != nil && !tok.ExpirationTime.IsZero() && tok.ExpirationTime.Before(now)
		rows = append(rows, row(tok.Name, tok.Type, tok.Global, tok.AccessorID, expired))
	}
	writeTable(e.stdout, rows)
	return exitOK
}

func runACLTokenInfo(e *env, c *command, args []string) int {
	fs := newFlags(c)
	t := addressFlag(fs)
	asJSON := jsonFlag(fs)
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	accessor, msg := accessorArg(fs)
	if msg != "" {
		return e.usageError(c, msg)
	}
	client, code, ok := e.aclClient(t)
	if !ok {
		return code
	}
	tok, _, err := client.ACLTokens().Info(accessor, e.queryOpts())
	if err != nil {
		return e.errorf("failed to read ACL token %s: %s", accessor, t.describeACL(err))
	}
	return e.writeTokenOut(tok, *asJSON, false)
}

func runACLTokenUpdate(e *env, c *command, args []string) int {
	fs := newFlags(c)
	t := addressFlag(fs)
	var f tokenFlags
	f.define(fs, "")
	asJSON := jsonFlag(fs)
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	accessor, msg := accessorArg(fs)
	if msg != "" {
		return e.usageError(c, msg)
	}
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	if !given["name"] && !given["type"] && !given["policy"] && !given["global"] {
		return e.usageError(c, "nothing to update: give -name, -type, -policy or -global")
	}
	if given["type"] {
		if msg := f.check(); msg != "" {
			return e.usageError(c, msg)
		}
	}
	client, code, ok := e.aclClient(t)
	if !ok {
		return code
	}
	tok, _, err := client.ACLTokens().Info(accessor, e.queryOpts())
	if err != nil {
		return e.errorf("failed to read ACL token %s: %s", accessor, t.describeACL(err))
	}
	f.apply(tok, given)
	updated, _, err := client.ACLTokens().Update(tok, e.writeOpts())
	if err != nil {
		return e.errorf("failed to update ACL token %s: %s", accessor, t.describeACL(err))
	}
	return e.writeTokenOut(updated, *asJSON, false)
}

// apply sets the given flags' fields on tok; the secret is not sent back.
func (f *tokenFlags) apply(tok *nomadapi.ACLToken, given map[string]bool) {
	tok.SecretID = ""
	if given["name"] {
		tok.Name = f.name
	}
	if given["type"] {
		tok.Type = f.typ
		if f.typ == acl.TypeManagement {
			tok.Policies = nil
		}
	}
	if given["policy"] {
		tok.Policies = f.policies
	}
	if given["global"] {
		tok.Global = f.global
	}
}

func runACLTokenDelete(e *env, c *command, args []string) int {
	fs := newFlags(c)
	t := addressFlag(fs)
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	accessor, msg := accessorArg(fs)
	if msg != "" {
		return e.usageError(c, msg)
	}
	client, code, ok := e.aclClient(t)
	if !ok {
		return code
	}
	if _, err := client.ACLTokens().Delete(accessor, e.writeOpts()); err != nil {
		return e.errorf("failed to delete ACL token %s: %s", accessor, t.describeACL(err))
	}
	fmt.Fprintf(e.stdout, "Token %s successfully deleted\n", accessor)
	return exitOK
}

func runACLTokenSelf(e *env, c *command, args []string) int {
	fs := newFlags(c)
	t := addressFlag(fs)
	asJSON := jsonFlag(fs)
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		return e.usageError(c, "acl token self takes no arguments")
	}
	if t.secret() == "" {
		return e.errorf("no ACL token to look up: set -token, MESHLET_TOKEN or NOMAD_TOKEN")
	}
	client, code, ok := e.aclClient(t)
	if !ok {
		return code
	}
	tok, _, err := client.ACLTokens().Self(e.queryOpts())
	if err != nil {
		return e.errorf("failed to look up the ACL token: %s", t.describeACL(err))
	}
	return e.writeTokenOut(tok, *asJSON, true)
}
