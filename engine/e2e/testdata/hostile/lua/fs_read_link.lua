-- want: lua/fs_read_link.lua:2: fs.read: path "link/secret.txt" is outside the workspace
return require("apollo.fs").read("link/secret.txt")
