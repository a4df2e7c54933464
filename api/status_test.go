package api

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"syscall"
	"testing"
)

func TestStatusFor(t *testing.T) {
	diskFull := &fs.PathError{Op: "write", Path: "/data/server/state.db", Err: syscall.ENOSPC}
	tests := []struct {
		err  error
		want int
	}{
		{fmt.Errorf("failed to store job: %w", diskFull), http.StatusInsufficientStorage},
		{fmt.Errorf("%w: job ID too long", ErrInvalid), http.StatusBadRequest},
		{fmt.Errorf("job x: %w", ErrNotFound), http.StatusNotFound},
		{&http.MaxBytesError{Limit: 1}, http.StatusRequestEntityTooLarge},
		{errors.New("boom"), http.StatusInternalServerError},
	}
	for _, tc := range tests {
		if got := statusFor(tc.err); got != tc.want {
			t.Errorf("statusFor(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
