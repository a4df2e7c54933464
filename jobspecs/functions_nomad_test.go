package jobspecs

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// Nomad's CIDR, YAML, crypto and convert functions called from a jobspec.
func TestNomadFunctions(t *testing.T) {
	tests := []struct {
		name, expr string
		want       any
	}{
		{"cidrhost", `cidrhost("10.12.112.0/20", 16)`, "10.12.112.16"},
		{"cidrhost ipv6", `cidrhost("fd00:fd12:3456:7890::/56", 34)`, "fd00:fd12:3456:7800::22"},
		{"cidrnetmask", `cidrnetmask("172.16.0.0/12")`, "255.240.0.0"},
		{"cidrsubnet", `cidrsubnet("172.16.0.0/12", 4, 2)`, "172.18.0.0/16"},
		{"cidrsubnets", `cidrsubnets("10.1.0.0/16", 4, 4, 8, 4)`, []any{"10.1.0.0/20", "10.1.16.0/20", "10.1.32.0/24", "10.1.48.0/20"}},
		{"yamldecode", `yamldecode("a: [1, 2]\nb: x\n").a[1]`, 2},
		{"yamldecode alias", `yamldecode("base: &b {port: 80}\nweb: *b\n").web.port`, 80},
		{"yamlencode", `yamlencode({a = "b", c = [1, 2]})`, "\"a\": \"b\"\n\"c\":\n- 1\n- 2\n"},
		{"yamlencode large", `strlen(yamlencode([for c in split("", format("%04000d", 0)) : format("%0200d", 0)]))`, 820000},
		{"yaml round trip", `yamldecode(yamlencode({x = ["y"]})).x[0]`, "y"},
		{"convert", `convert({a = 1}, map(string))["a"]`, "1"},
		{"convert list", `length(convert(["a", "a"], set(string)))`, 1},
		{"convert object", `convert({a = 1, b = [true]}, object({a = string, b = list(string)})).b[0]`, "true"},
		{"bcrypt cost", `substr(bcrypt("secret", 5), 0, 7)`, "$2a$05$"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			task, diags := parseTask(t, "", "      config { x = "+tc.expr+" }", nil)
			if diags.HasErrors() {
				t.Fatal(diags.Error())
			}
			if got := task.Config["x"]; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%s = %#v, want %#v", tc.expr, got, tc.want)
			}
		})
	}
}

// bcrypt's default cost is Nomad's (10), and its hash verifies.
func TestBcryptFunction(t *testing.T) {
	task, diags := parseTask(t, "", `      config { x = bcrypt("hunter2") }`, nil)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	hash, _ := task.Config["x"].(string)
	if !strings.HasPrefix(hash, "$2a$10$") || bcrypt.CompareHashAndPassword([]byte(hash), []byte("hunter2")) != nil {
		t.Errorf("bcrypt = %q, not a cost-10 hash of the password", hash)
	}
}

// rsadecrypt decrypts what was encrypted with the public half of a PEM
// (PKCS #1) key.
func TestRSADecryptFunction(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	//lint:ignore SA1019 Nomad's rsadecrypt takes PKCS #1 v1.5 ciphertext, so the test makes some.
	ct, err := rsa.EncryptPKCS1v15(rand.Reader, &key.PublicKey, []byte("db-password"))
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	locals := fmt.Sprintf("locals {\n  key = <<EOT\n%sEOT\n}\n", keyPEM)
	expr := fmt.Sprintf(`rsadecrypt(%q, local.key)`, base64.StdEncoding.EncodeToString(ct))
	task, diags := parseTask(t, locals, "      config { x = "+expr+" }", nil)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	if task.Config["x"] != "db-password" {
		t.Errorf("rsadecrypt = %#v", task.Config["x"])
	}
}

// Errors of the functions, and their bounds, at the call's position (the
// expression starts at column 20 of line 6).
func TestNomadFunctionErrors(t *testing.T) {
	tests := []struct {
		name, expr, want string
	}{
		{"cidrsubnet too long", `cidrsubnet("10.0.0.0/30", 4, 0)`,
			`t.hcl:6:20: error: Error in function call; Call to function "cidrsubnet" failed: insufficient address space to extend prefix of 30 by 4.`},
		{"cidrhost bad prefix", `cidrhost("10.0.0.0", 1)`,
			`t.hcl:6:20: error: Error in function call; Call to function "cidrhost" failed: invalid CIDR expression: invalid CIDR address: 10.0.0.0.`},
		{"cidrsubnets no space", `cidrsubnets("10.0.0.0/24", 1, 1, 1)`,
			`t.hcl:6:53: error: Invalid function argument; Invalid value for "newbits" parameter: not enough remaining address space for a subnet with a prefix of 25 bits after 10.0.0.128/25.`},
		{"yamldecode syntax", `yamldecode("a: [")`,
			`t.hcl:6:20: error: Error in function call; Call to function "yamldecode" failed: invalid YAML: line 1: did not find expected node content.`},
		{"convert", `convert("x", number)`,
			`t.hcl:6:29: error: Invalid function argument; Invalid value for "value" parameter: a number is required.`},
		{"bcrypt cost", `bcrypt("x", 20)`,
			`t.hcl:6:20: error: Evaluation limit exceeded; bcrypt cost 20 is above the limit of 14.`},
		{"rsadecrypt key size", `rsadecrypt("", format("%09000d", 0))`,
			`t.hcl:6:20: error: Evaluation limit exceeded; rsadecrypt's private key has 9000 bytes; the limit is 8192.`},
		{"yaml alias bomb", `yamldecode(` + yamlBomb(8) + `)`,
			`t.hcl:6:20: error: Evaluation limit exceeded; yamldecode would produce more than 100000 values (YAML aliases expanded); the limit is 100000.`},
		{"yaml self alias", `yamldecode("a: &a [*a]")`,
			`t.hcl:6:20: error: Error in function call; Call to function "yamldecode" failed: invalid YAML: cannot refer to anchor "a" from inside its own definition.`},
		// go-cty-yaml's parser takes minutes for 1 MiB of "[".
		{"yaml nesting", `yamldecode(format("%s%s", join("", [for i in range(1000) : "["]), join("", [for i in range(1000) : "]"])))`,
			`t.hcl:6:20: error: Evaluation limit exceeded; yamldecode: the document nests more than 128 levels deep.`},
		{"yaml very deep", `yamldecode(replace(format("%0400000d", 0), "0", "["))`,
			`t.hcl:6:20: error: Evaluation limit exceeded; yamldecode: the document nests more than 128 levels deep.`},
		{"yamlencode", `yamlencode([for c in split("", format("%06000d", 0)) : format("%0200d", 0)])`,
			`t.hcl:6:20: error: Evaluation limit exceeded; yamlencode would produce a string of 1048665 bytes or more; the limit is 1048576 bytes.`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, diags := parseTask(t, "", "      config { x = "+tc.expr+" }", nil)
			errs := diags.Errs()
			if len(errs) == 0 || errs[0].String() != tc.want {
				t.Fatalf("first error\n%v\nwant\n%s\nall: %s", errs, tc.want, diags.Error())
			}
		})
	}
}

// cidrsubnets makes one element per argument: bounded by the collection
// limit.
func TestCIDRSubnetsLimit(t *testing.T) {
	opts := &ParseOptions{Limits: &Limits{MaxCollectionLen: 3}}
	_, diags := parseTask(t, "", `      config { x = cidrsubnets("10.0.0.0/8", 8, 8, 8, 8) }`, opts)
	want := `t.hcl:6:20: error: Evaluation limit exceeded; cidrsubnets would produce 4 subnets; the limit is 3.`
	if errs := diags.Errs(); len(errs) == 0 || errs[0].String() != want {
		t.Fatalf("errors: %s\nwant %s", diags.Error(), want)
	}
}

// Each bcrypt round is charged to the evaluation budget: a loop of
// hashes stops when the budget is spent (here after four at cost 10).
func TestBcryptBudget(t *testing.T) {
	opts := &ParseOptions{Limits: &Limits{MaxEvalCost: 4 << 20}}
	_, diags := parseTask(t, "", `      config { x = [for i in range(64) : bcrypt("x")] }`, opts)
	want := `t.hcl:6:42: error: Evaluation limit exceeded; Evaluating the jobspec costs more than 4194304 units (bytes of strings produced plus 256 per collection element); simplify its expressions.`
	if errs := diags.Errs(); len(errs) == 0 || errs[0].String() != want {
		t.Fatalf("errors: %s\nwant %s", diags.Error(), want)
	}
}

// yamlBomb is a "billion laughs" document as an HCL string: levels of
// ten aliases to the level before.
func yamlBomb(levels int) string {
	var b strings.Builder
	b.WriteString(`"l0: &l0 [x]\n`)
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, "l%d: &l%d [", i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*l%d", i-1)
		}
		b.WriteString(`]\n`)
	}
	b.WriteString(`"`)
	return b.String()
}
