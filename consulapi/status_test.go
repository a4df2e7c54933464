package consulapi

import (
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/intention"
)

// A write that failed on a full disk stored nothing: the client is told
// so with 507, not a generic 500.
func TestFailForStatuses(t *testing.T) {
	s := &Server{logger: hclog.NewNullLogger()}
	diskFull := &fs.PathError{Op: "write", Path: "intentions.json", Err: syscall.ENOSPC}
	for _, tc := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("failed to persist intentions: %w", diskFull), http.StatusInsufficientStorage},
		{fmt.Errorf("%w: bad name", intention.ErrInvalid), http.StatusBadRequest},
		{intention.ErrNotFound, http.StatusNotFound},
		{intention.ErrExists, http.StatusConflict},
		{fmt.Errorf("%w: %w", errBadRequest, &http.MaxBytesError{Limit: maxBody}), http.StatusRequestEntityTooLarge},
	} {
		rec := httptest.NewRecorder()
		s.failFor(rec, httptest.NewRequest("PUT", "/v1/connect/intentions/exact", nil), tc.err)
		if rec.Code != tc.want {
			t.Errorf("failFor(%v) = %d, want %d", tc.err, rec.Code, tc.want)
		}
	}
}
