package experiment_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/mhalab/mha/experiment"
)

// ExampleRun runs chapter 000's parameter count, whose table sets the formula beside the
// parameters of the layer built, and prints the first rows. The other experiments train or time
// models; Config.Quick makes them smaller.
func ExampleRun() {
	res, err := experiment.Run(context.Background(), "params", experiment.Config{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Title)
	fmt.Println(strings.Join(res.Table.Columns, " | "))
	for _, row := range res.Table.Rows[:2] {
		fmt.Println(strings.Join(row, " | "))
	}
	// Output:
	// Parameter count of multi-head attention: the formula against the built layer (chapter 000, 5.2.3)
	// E | H | head sizes | kdim | vdim | bias | bias_kv | zero_attn | formula | built | state dict | match
	// 4 | 2 | 2 | 4 | 4 | yes | no | no | 80 | 80 | 80 | yes
	// 512 | 8 | 64 | 512 | 512 | yes | no | no | 1050624 | 1050624 | 1050624 | yes
}
