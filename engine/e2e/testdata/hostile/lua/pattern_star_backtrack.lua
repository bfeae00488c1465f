-- want: timed out
return (("a"):rep(30) .. "b"):find(("a*"):rep(30) .. "c")
