-- want: lua/dofile_stdin.lua:2: 'dofile' is not available
dofile()
