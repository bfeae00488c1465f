-- want: json
-- serial
return require("apollo.json").decode(string.rep("[", 1e6))
