package docker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A pull cut by image_pull_timeout says so; another failure keeps the
// daemon's words. Both wrap ErrImagePull.
func TestPullError(t *testing.T) {
	tc := &taskConfig{Image: "r.example/x:1", PullTimeout: 3 * time.Second}
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	err := pullError(expired, tc, errors.New(`Post "http://%2Fsock/v1.41/images/create": context deadline exceeded`))
	if !errors.Is(err, ErrImagePull) || !errors.Is(err, context.DeadlineExceeded) ||
		!strings.Contains(err.Error(), "r.example/x:1: not pulled within image_pull_timeout (3s)") {
		t.Errorf("timed out pull: %v", err)
	}
	refused := errors.New("connection refused")
	err = pullError(context.Background(), tc, refused)
	if !errors.Is(err, ErrImagePull) || !errors.Is(err, refused) || strings.Contains(err.Error(), "image_pull_timeout") {
		t.Errorf("refused pull: %v", err)
	}
}
