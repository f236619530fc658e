"""EXPECT: runtime_error -- read the private answers by their absolute host path, then cheat with them."""
import shutil
shutil.copy("__PRIVATE_PATH__", "submission.csv")
print(open("__PRIVATE_PATH__").read())
