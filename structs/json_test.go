package structs

import (
	"encoding/json"
	"testing"
)

func TestTaskGroupCountDefault(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{`{"Name":"g"}`, 1},
		{`{"Name":"g","Count":null}`, 1},
		{`{"Name":"g","Count":0}`, 0},
		{`{"Name":"g","Count":3}`, 3},
	}
	for _, tt := range tests {
		var tg TaskGroup
		if err := json.Unmarshal([]byte(tt.in), &tg); err != nil {
			t.Fatal(err)
		}
		if tg.Count != tt.want || tg.Name != "g" {
			t.Errorf("%s → Count %d Name %q, want %d", tt.in, tg.Count, tg.Name, tt.want)
		}
	}
	b, _ := json.Marshal(TaskGroup{Name: "g", Count: 0})
	var back TaskGroup
	if err := json.Unmarshal(b, &back); err != nil || back.Count != 0 {
		t.Fatalf("round trip of Count 0 = %d, %v", back.Count, err)
	}
}
