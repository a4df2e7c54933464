package procfs

import (
	"errors"
	"os"
	"os/exec"
	"testing"
)

func TestParseStat(t *testing.T) {
	tail := " 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23"
	tests := []struct {
		name    string
		in      string
		want    Stat
		wantErr bool
	}{
		{"plain", "42 (sleep) S 7 42" + tail, Stat{PID: 42, State: 'S', PPID: 7, PGRP: 42, Session: 1, UTime: 9, STime: 10, StartTime: 17, RSSPages: 19}, false},
		{"parens in name", "42 (a) b (c) R 7 40" + tail, Stat{PID: 42, State: 'R', PPID: 7, PGRP: 40, Session: 1, UTime: 9, STime: 10, StartTime: 17, RSSPages: 19}, false},
		{"truncated", "42 (x) S 1 2 3", Stat{}, true},
		{"no command", "42 x S", Stat{}, true},
		{"not a number", "42 (x) S y 42" + tail, Stat{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStat(42, tc.in)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("parsed %+v, want error", got)
				}
				return
			}
			if err != nil || *got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestLiveProcess(t *testing.T) {
	st, err := ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !Alive(os.Getpid(), st.StartTime) {
		t.Fatal("own process not alive")
	}
	if Alive(os.Getpid(), st.StartTime+1) {
		t.Fatal("a different start time must not match")
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	tree := Tree(os.Getpid())
	found := false
	for _, p := range tree {
		found = found || p == cmd.Process.Pid
	}
	if !found || tree[0] != os.Getpid() {
		t.Fatalf("Tree(%d) = %v, want it to contain child %d", os.Getpid(), tree, cmd.Process.Pid)
	}
	if _, err := ReadStat(1 << 30); !errors.Is(err, ErrNoProcess) {
		t.Fatalf("missing pid: %v, want ErrNoProcess", err)
	}
}
