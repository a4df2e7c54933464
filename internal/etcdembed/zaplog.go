package etcdembed

import (
	"fmt"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// routine lists warnings etcd logs on every start of a member configured
// as Start does; they are logged at debug instead.
var routine = map[string]bool{
	// One listener serves gRPC and HTTP (/health, /metrics) on purpose.
	"Running http and grpc server on single port. This is not recommended for production.": true,
	// MaxRequestBytes is raised above etcd's recommended 10 MiB on purpose.
	"exceeded recommended request limit": true,
	// etcd's own auth is off (mutual TLS is used): no tokens are issued.
	"simple token is not cryptographically signed": true,
}

// routineOnClose lists what etcd logs, at warn or error, on every normal
// Close: its servers report their closed listeners.
var routineOnClose = map[string]bool{
	"setting up serving from embedded etcd failed.": true,
	"stopping insecure grpc server due to error":    true,
	"stopped insecure grpc server due to error":     true,
	"stopping secure grpc server due to error":      true,
	"stopped secure grpc server due to error":       true,
}

// missingTerm is the error etcd's storage version monitor logs (at warn and
// error) when it runs on a new cluster before the first commit reached the
// backend; it retries every few seconds and then succeeds.
const missingTerm = "missing term information"

// newZapLogger returns a zap logger that writes to lg at min and above.
// Once closing is set, the routine messages of a close are debug.
func newZapLogger(lg hclog.Logger, min hclog.Level, closing *atomic.Bool) *zap.Logger {
	if closing == nil {
		closing = new(atomic.Bool)
	}
	return zap.New(&hclogCore{lg: lg, min: min, closing: closing})
}

// hclogCore is a zapcore.Core writing to an hclog.Logger. Field keys are
// snake_case ("local-member-id" becomes "local_member_id").
type hclogCore struct {
	lg      hclog.Logger
	min     hclog.Level
	closing *atomic.Bool
	fields  []zapcore.Field
}

func (c *hclogCore) Enabled(l zapcore.Level) bool {
	return hclogLevel(l) >= c.min && hclogLevel(l) >= c.lg.GetLevel()
}

func (c *hclogCore) With(fields []zapcore.Field) zapcore.Core {
	out := *c
	out.fields = append(append([]zapcore.Field(nil), c.fields...), fields...)
	return &out
}

func (c *hclogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if l := c.level(e); l >= c.min && l >= c.lg.GetLevel() {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *hclogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	level := c.level(e)
	if err, ok := enc.Fields["error"].(string); ok && strings.Contains(err, missingTerm) {
		level = hclog.Debug
	}
	if level < c.min || level < c.lg.GetLevel() {
		return nil
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	args := make([]any, 0, 2*len(keys)+2)
	if e.LoggerName != "" {
		args = append(args, "component", e.LoggerName)
	}
	for _, k := range keys {
		args = append(args, strings.ReplaceAll(k, "-", "_"), flatten(enc.Fields[k]))
	}
	c.lg.Log(level, e.Message, args...)
	return nil
}

func (c *hclogCore) Sync() error { return nil }

// level is the hclog level an entry is logged at.
func (c *hclogCore) level(e zapcore.Entry) hclog.Level {
	if routine[e.Message] || (routineOnClose[e.Message] && c.closing.Load()) {
		return hclog.Debug
	}
	return hclogLevel(e.Level)
}

func hclogLevel(l zapcore.Level) hclog.Level {
	switch {
	case l < zapcore.InfoLevel:
		return hclog.Debug
	case l == zapcore.InfoLevel:
		return hclog.Info
	case l == zapcore.WarnLevel:
		return hclog.Warn
	default:
		return hclog.Error
	}
}

// flatten keeps scalar values and renders nested ones (arrays, objects) on
// one line.
func flatten(v any) any {
	switch v.(type) {
	case []any, map[string]any:
		return fmt.Sprint(v)
	}
	return v
}
