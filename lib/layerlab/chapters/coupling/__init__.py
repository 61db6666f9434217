"""chapters/coupling"""
