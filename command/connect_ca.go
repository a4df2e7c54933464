package command

import (
	"encoding/json"
	"fmt"
	"os"

	consulapi "github.com/hashicorp/consul/api"
)

// `meshlet connect ca get-config | set-config`, Consul's verbs and flags,
// over the connect API's /v1/connect/ca/configuration.

func init() {
	register(
		&command{
			name: "connect ca", args: "<subcommand> [options]", hidden: true,
			synopsis: "Inspect and rotate the mesh's certificate authority",
			help:     "Lists the connect ca subcommands.",
			example:  "$ meshlet connect ca get-config",
			run:      runConnectCA,
		},
		&command{
			name: "connect ca get-config", args: "[options]",
			synopsis: "Display the mesh CA configuration",
			help: `Displays the mesh certificate authority's configuration as JSON, in the
shape of 'consul connect ca get-config': Provider "consul" (meshlet's
built-in CA), Config (LeafCertTTL, PrivateKeyType, PrivateKeyBits) and the
indexes of the last root rotation.`,
			example: "$ meshlet connect ca get-config > ca.json",
			run:     runConnectCAGetConfig,
		},
		&command{
			name: "connect ca set-config", args: "-config-file FILE [options]",
			synopsis: "Rotate the mesh CA root (set the CA configuration)",
			help: `Sets the mesh certificate authority's configuration from a JSON file in
Consul's CAConfig shape, as 'consul connect ca set-config' does.

Every accepted set-config ROTATES the cluster's CA root: the servers make a
new root key whose certificate is cross-signed by the old root, as Consul's
built-in provider does when its configuration changes. Both roots stay
trusted until every leaf was re-issued under the new root and one leaf TTL
has passed, so connections keep working during the rotation.

Provider must be "consul". Config may carry only what get-config shows,
with the same values (LeafCertTTL, PrivateKeyType "ec", PrivateKeyBits
256; the leaf TTL is the servers' connect.leaf_ttl), and no PrivateKey or
RootCert (meshlet generates its own root keys): anything else is refused
with a one-line error and rotates nothing. The command returns once the
servers stored the new root; a client agent's own roots follow within
moments.`,
			example: "$ meshlet connect ca get-config > ca.json\n$ meshlet connect ca set-config -config-file ca.json",
			run:     runConnectCASetConfig,
		},
	)
}

// runConnectCA lists the ca subcommands (`meshlet connect ca`), as a
// group does.
func runConnectCA(e *env, c *command, args []string) int {
	return e.runGroup(group{name: c.name, synopsis: c.synopsis,
		example: "$ meshlet connect ca get-config\n  $ meshlet connect ca set-config -config-file ca.json"}, args)
}

func runConnectCAGetConfig(e *env, c *command, args []string) int {
	fs := newFlags(c)
	addr := connectAddressFlag(fs)
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		return e.usageError(c, "connect ca get-config takes no arguments")
	}
	client, err := consulClient(addr)
	if err != nil {
		return e.errorf("%v", err)
	}
	cfg, _, err := client.Connect().CAGetConfig(nil)
	if err != nil {
		return e.errorf("failed to read the CA configuration: %s", describeConsul(err, addr.Addr))
	}
	out, err := json.MarshalIndent(cfg, "", "\t")
	if err != nil {
		return e.errorf("failed to format the CA configuration: %v", err)
	}
	fmt.Fprintln(e.stdout, string(out))
	return exitOK
}

func runConnectCASetConfig(e *env, c *command, args []string) int {
	fs := newFlags(c)
	file := fs.String("config-file", "", "`FILE` holding the CA configuration as JSON (Consul's CAConfig)")
	force := fs.Bool("force-without-cross-signing", false,
		"accepted for Consul compatibility; meshlet's CA always cross-signs the new root")
	addr := connectAddressFlag(fs)
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		return e.usageError(c, "connect ca set-config takes no arguments")
	}
	if *file == "" {
		return e.usageError(c, "the -config-file flag is required")
	}
	raw, err := os.ReadFile(*file)
	if err != nil {
		return e.errorf("failed to read the config file: %v", err)
	}
	var cfg consulapi.CAConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return e.errorf("failed to parse the config file %s: %v", *file, err)
	}
	cfg.ForceWithoutCrossSigning = *force
	client, err := consulClient(addr)
	if err != nil {
		return e.errorf("%v", err)
	}
	if _, err := client.Connect().CASetConfig(&cfg, nil); err != nil {
		return e.errorf("failed to set the CA configuration: %s", describeConsul(err, addr.Addr))
	}
	fmt.Fprintln(e.stdout, "Configuration updated!")
	return exitOK
}
