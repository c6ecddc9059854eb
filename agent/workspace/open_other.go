//go:build !unix

package workspace

import "os"

const openReadFlags = os.O_RDONLY
