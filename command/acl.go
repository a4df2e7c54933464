package command

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/internal/lazyre"
)

// `meshlet acl ...`: Nomad's ACL verbs over the agent's Nomad-shaped
// /v1/acl/ endpoints, through nomad/api's ACLPolicies and ACLTokens. The
// output is Nomad's (outputACLToken, formatACLPolicy, formatTokens...).
// A token's secret is printed only by the commands whose purpose is to
// hand it out: bootstrap, token create and token self.

func init() {
	register(
		&command{
			name: "acl bootstrap", args: "[options] [FILE]", synopsis: "Bootstrap the ACL system and print the initial management token",
			help: `Creates the first management token. It works once per cluster: later calls
fail with "ACL bootstrap already done". The token's Secret ID is printed;
keep it safe and hand it to the CLI with -token or MESHLET_TOKEN. With FILE
("-" for stdin) the token's Secret ID is the UUID the file holds, as Nomad's
bootstrap secret: provisioning can choose it before the cluster exists.`,
			example: "$ meshlet acl bootstrap\n$ export MESHLET_TOKEN=<Secret ID>\n$ meshlet acl bootstrap /etc/meshlet/management-token",
			run:     runACLBootstrap,
		},
		&command{
			name: "acl policy", args: "<subcommand> [options]", hidden: true,
			synopsis: "Manage ACL policies", help: "Lists the acl policy subcommands.",
			example: "$ meshlet acl policy apply readonly readonly.hcl\n  $ meshlet acl policy list", run: runACLSubgroup,
		},
		&command{
			name: "acl token", args: "<subcommand> [options]", hidden: true,
			synopsis: "Manage ACL tokens", help: "Lists the acl token subcommands.",
			example: "$ meshlet acl token create -name ci -policy readonly\n  $ meshlet acl token list", run: runACLSubgroup,
		},
	)
}

// runACLSubgroup lists the subcommands of "acl policy" or "acl token" as
// a group does.
func runACLSubgroup(e *env, c *command, args []string) int {
	return e.runGroup(group{name: c.name, synopsis: c.synopsis, example: c.example}, args)
}

// maxPolicyFile bounds a policy's rules file.
const maxPolicyFile = 1 << 20

// aclNameRE is Nomad's rule for policy names, also applied to accessor
// IDs (UUIDs): both go into the request's path, which they must not alter.
var aclNameRE = lazyre.New(`^[a-zA-Z0-9-]{1,128}$`)

// jsonFlag adds -json.
func jsonFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("json", false, "print the API's answer as JSON")
}

// aclClient is the Nomad API client for an acl command.
func (e *env) aclClient(t *apiTarget) (*nomadapi.Client, int, bool) {
	client, err := nomadClient(t)
	if err != nil {
		return nil, e.errorf("%v", err), false
	}
	return client, 0, true
}

// queryOpts and writeOpts tie a request to the command's context.
func (e *env) queryOpts() *nomadapi.QueryOptions {
	return (&nomadapi.QueryOptions{}).WithContext(e.ctx)
}

func (e *env) writeOpts() *nomadapi.WriteOptions {
	return (&nomadapi.WriteOptions{}).WithContext(e.ctx)
}

// writeJSON prints v as indented JSON, as Nomad's -json does.
func (e *env) writeJSON(v any) int {
	b, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		return e.errorf("failed to encode JSON: %v", err)
	}
	fmt.Fprintln(e.stdout, string(b))
	return exitOK
}

// writeTokenOut prints tok as JSON or as Nomad's key/value block. Unless
// showSecret, its secret is left out of both.
func (e *env) writeTokenOut(tok *nomadapi.ACLToken, asJSON, showSecret bool) int {
	if !showSecret {
		redacted := *tok
		redacted.SecretID = ""
		tok = &redacted
	}
	if asJSON {
		return e.writeJSON(tok)
	}
	writeToken(e.stdout, tok, showSecret)
	return exitOK
}

// writeToken prints a token as Nomad's outputACLToken does; the Secret ID
// reads "<hidden>" unless showSecret.
func writeToken(w io.Writer, tok *nomadapi.ACLToken, showSecret bool) {
	secret := "<hidden>"
	if showSecret {
		secret = tok.SecretID
	}
	policies := "n/a"
	if tok.Type != acl.TypeManagement {
		policies = fmt.Sprint(tok.Policies)
	}
	writeKV(w, [][2]string{
		{"Accessor ID", tok.AccessorID},
		{"Secret ID", secret},
		{"Name", tok.Name},
		{"Type", tok.Type},
		{"Global", fmt.Sprint(tok.Global)},
		{"Create Time", fmt.Sprint(tok.CreateTime)},
		{"Expiry Time", expiryTime(tok.ExpirationTime)},
		{"Create Index", fmt.Sprint(tok.CreateIndex)},
		{"Modify Index", fmt.Sprint(tok.ModifyIndex)},
		{"Policies", policies},
	})
}

// expiryTime is Nomad's expiryTimeString.
func expiryTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "<none>"
	}
	return t.String()
}

// writeText prints multi-line text from the agent (a policy's rules)
// with tabs and newlines kept and every other unprintable character
// escaped, so that the text cannot drive the terminal.
func writeText(w io.Writer, text string) {
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		cells := strings.Split(strings.TrimSuffix(line, "\r"), "\t")
		for i, cell := range cells {
			cells[i] = escapeUnprintable(cell)
		}
		fmt.Fprintln(w, strings.Join(cells, "\t"))
	}
}

func runACLBootstrap(e *env, c *command, args []string) int {
	fs := newFlags(c)
	t := addressFlag(fs)
	asJSON := jsonFlag(fs)
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if fs.NArg() > 1 {
		return e.usageError(c, "acl bootstrap takes at most one argument, a file holding the secret")
	}
	var secret string
	if fs.NArg() == 1 {
		b, err := readInputFile(e.stdin, fs.Arg(0), "bootstrap secret file")
		if err != nil {
			return e.errorf("%v", err)
		}
		secret = strings.TrimSpace(string(b))
	}
	client, code, ok := e.aclClient(t)
	if !ok {
		return code
	}
	tok, _, err := client.ACLTokens().BootstrapOpts(secret, e.writeOpts())
	if err != nil {
		return e.errorf("failed to bootstrap the ACL system: %s", t.describeACL(err))
	}
	return e.writeTokenOut(tok, *asJSON, true)
}
