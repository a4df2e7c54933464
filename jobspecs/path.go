package jobspecs

import (
	"fmt"
	"strings"
)

// path names one place in a job. key is a stable machine key built from
// indices ("job/group[0]/task[1].driver"); Parse maps it to a source range
// recorded while decoding. human is what Validate prints instead of a
// position (`group "api": task "web"`).
type path struct {
	key   string
	human string
}

var jobPath = path{key: "job"}

// item is a repeated block: group, task, service, port...
func (p path) item(kind string, i int, name string) path {
	h := fmt.Sprintf("%s[%d]", kind, i)
	if name != "" {
		h = fmt.Sprintf("%s %q", kind, name)
	}
	return path{key: fmt.Sprintf("%s/%s[%d]", p.key, kind, i), human: joinHuman(p.human, h)}
}

// sub is a singleton block: connect, proxy, resources...
func (p path) sub(kind string) path {
	return path{key: p.key + "/" + kind, human: joinHuman(p.human, kind)}
}

// attr is an attribute of the block; it does not change the human name
// because messages name the attribute themselves.
func (p path) attr(name string) path {
	return path{key: p.key + "." + name, human: p.human}
}

// parent strips the last element of a key; "" when there is none.
func parentKey(key string) string {
	i := strings.LastIndexAny(key, "/.")
	if i < 0 {
		return ""
	}
	return key[:i]
}

func joinHuman(a, b string) string {
	if a == "" {
		return b
	}
	return a + ": " + b
}
